package controller

import (
	"context"
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/queue"
)

// TestWriteConflictIsARetryNotAnError: Kargo writing a Stage's status
// between the read and the guarded store of its record makes the store
// conflict. The sync is retried and stores the record; the conflicts are
// counted as such, not as reconcile errors, and are not logged as errors.
func TestWriteConflictIsARetryNotAnError(t *testing.T) {
	const injected = 2
	f, log := newLoggedFixture(t, failStagePatches(injected, func() error {
		return apierrors.NewConflict(schema.GroupResource{Group: "kargo.akuity.io", Resource: "stages"}, "prod",
			fmt.Errorf("the object has been modified; please apply your changes to the latest version and try again"))
	}), healthyStage("prod", nil))
	f.waitEvent("Normal HealthLatched") // made only once the record is stored
	if got := f.record("prod").Phase; got != latch.PhaseLatched {
		t.Fatalf("phase = %s, want Latched", got)
	}
	if got := unlabeledCounter(t, f.reg, "kargo_latch_write_conflicts_total"); got != injected {
		t.Errorf("kargo_latch_write_conflicts_total = %v, want %d", got, injected)
	}
	if got := unlabeledCounter(t, f.reg, "kargo_latch_reconcile_errors_total"); got != 0 {
		t.Errorf("kargo_latch_reconcile_errors_total = %v, want 0: a conflict is a retry", got)
	}
	for _, e := range log.Data() {
		if e.Type == ktesting.LogError {
			t.Errorf("logged an error for a conflict: %s %v", e.Message, e.Err)
		}
	}
}

// TestSyncErrorIsCountedAndLoggedWithItsKey: a real error is counted and
// logged at error level with the Stage's key as it happens, before and
// without the key being dropped.
func TestSyncErrorIsCountedAndLoggedWithItsKey(t *testing.T) {
	f, log := newLoggedFixture(t, failStagePatches(1, func() error {
		return apierrors.NewInternalError(fmt.Errorf("injected: etcd timed out"))
	}), healthyStage("prod", nil))
	f.waitEvent("Normal HealthLatched") // the retry stored the record
	if got := unlabeledCounter(t, f.reg, "kargo_latch_reconcile_errors_total"); got != 1 {
		t.Errorf("kargo_latch_reconcile_errors_total = %v, want 1", got)
	}
	if got := unlabeledCounter(t, f.reg, "kargo_latch_write_conflicts_total"); got != 0 {
		t.Errorf("kargo_latch_write_conflicts_total = %v, want 0", got)
	}
	var logged []ktesting.LogEntry
	for _, e := range log.Data() {
		if e.Type == ktesting.LogError {
			logged = append(logged, e)
		}
	}
	if len(logged) != 1 {
		t.Fatalf("%d error log entries, want 1: %+v", len(logged), logged)
	}
	e := logged[0]
	if e.Err == nil || !apierrors.IsInternalError(e.Err) || fmt.Sprint(e.ParameterKVList) != fmt.Sprint([]any{"stage", klog.KRef("shop", "prod")}) {
		t.Errorf("logged %q err=%v %v; want the API error with stage=shop/prod", e.Message, e.Err, e.ParameterKVList)
	}
}

// failStagePatches makes the first n patches of a Stage fail with err().
func failStagePatches(n int, err func() error) func(*fixture) {
	return func(f *fixture) {
		left := n
		f.client.PrependReactor("patch", "stages", func(k8stesting.Action) (bool, runtime.Object, error) {
			if left == 0 {
				return false, nil, nil
			}
			left--
			return true, nil, err()
		})
	}
}

// newLoggedFixture is newFixtureWith whose controller logs into a buffer
// the test can read.
func newLoggedFixture(t *testing.T, setup func(*fixture), objects ...*unstructured.Unstructured) (*fixture, ktesting.Buffer) {
	t.Helper()
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	return startFixture(t, false, setup, logger, objects...), logger.GetSink().(ktesting.Underlier).GetBuffer()
}

// unlabeledCounter reads an unlabeled counter from reg.
func unlabeledCounter(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	return scalarMetric(t, reg, name, func(m *dto.Metric) float64 { return m.GetCounter().GetValue() })
}

// scalarMetric reads the value of an unlabeled metric of reg.
func scalarMetric(t *testing.T, reg *prometheus.Registry, name string, value func(*dto.Metric) float64) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return value(mf.GetMetric()[0])
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestDroppedConflictIsAnError: a key that conflicted on every retry is
// dropped; that is work given up, counted and logged as an error.
func TestDroppedConflictIsAnError(t *testing.T) {
	f := newFixture(t, false, healthyStage("prod", nil))
	f.waitEvent("Normal HealthLatched")
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	log := logger.GetSink().(ktesting.Underlier).GetBuffer()
	conflict := apierrors.NewConflict(schema.GroupResource{Group: "kargo.akuity.io", Resource: "stages"}, "prod", fmt.Errorf("modified"))
	report := f.c.syncFailed(klog.NewContext(context.Background(), logger), "stage")
	key := cache.NewObjectName("shop", "prod")
	report(key, conflict)
	report(key, fmt.Errorf("%w after 15 retries: %w", queue.ErrDropped, conflict))
	if got := unlabeledCounter(t, f.reg, "kargo_latch_write_conflicts_total"); got != 1 {
		t.Errorf("kargo_latch_write_conflicts_total = %v, want 1: the retried conflict", got)
	}
	if got := unlabeledCounter(t, f.reg, "kargo_latch_reconcile_errors_total"); got != 1 {
		t.Errorf("kargo_latch_reconcile_errors_total = %v, want 1: the drop", got)
	}
	errorsLogged := 0
	for _, e := range log.Data() {
		if e.Type == ktesting.LogError {
			errorsLogged++
		}
	}
	if errorsLogged != 1 {
		t.Errorf("%d errors logged, want 1: the drop", errorsLogged)
	}
}
