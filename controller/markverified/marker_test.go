package markverified

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/controller/report"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/metrics"
)

var t0 = time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)

func freight(name string, verifiedIn map[string]any) *unstructured.Unstructured {
	f := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kargo.akuity.io/v1alpha1", "kind": "Freight",
		"metadata": map[string]any{"name": name, "namespace": "shop", "resourceVersion": "1"},
	}}
	if verifiedIn != nil {
		_ = unstructured.SetNestedMap(f.Object, verifiedIn, "status", "verifiedIn")
	}
	return f
}

type fixture struct {
	client *dynamicfake.FakeDynamicClient
	kube   *kubefake.Clientset
	marker *Marker
	stage  *kargo.Stage
}

func newFixture(t *testing.T, objs ...runtime.Object) *fixture {
	t.Helper()
	scheme := runtime.NewScheme()
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(scheme,
		map[schema.GroupVersionResource]string{kargo.FreightsResource: "FreightList"}, objs...)
	kube := kubefake.NewClientset()
	rep := report.New(kube, record.NewFakeRecorder(10), clocktesting.NewFakeClock(t0))
	noPauses := func(context.Context, string, string) ([]*v1alpha1.StagePause, error) { return nil, nil }
	return &fixture{
		client: client, kube: kube,
		marker: New(client, rep, metrics.New(prometheus.NewRegistry(), "test"), noPauses),
		stage:  &kargo.Stage{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "prod", UID: "stage-uid"}},
	}
}

func (f *fixture) mark(t *testing.T, freights ...string) error {
	_, ctx := ktesting.NewTestContext(t)
	a := latch.Action{Kind: latch.ActionMarkVerified, Freight: freights, VerifiedAt: t0, Message: "latched"}
	reads := f.marker.StartReads(ctx, "shop", "prod", freights)
	defer reads.Wait()
	return f.marker.Mark(ctx, f.stage, latch.Record{}, a, reads)
}

func (f *fixture) verifiedIn(t *testing.T, name string) map[string]any {
	t.Helper()
	u, err := f.client.Resource(kargo.FreightsResource).Namespace("shop").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m, _, _ := unstructured.NestedMap(u.Object, "status", "verifiedIn")
	return m
}

// A mark adds the Stage's key only, beside the entries of other Stages, and
// makes one FreightVerified Event.
func TestMarkWritesTheStagesKeyAndOneEvent(t *testing.T) {
	f := newFixture(t, freight("f1", map[string]any{"qa": map[string]any{"verifiedAt": "2026-12-01T00:00:00Z"}}))
	if err := f.mark(t, "f1"); err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"qa":   map[string]any{"verifiedAt": "2026-12-01T00:00:00Z"},
		"prod": map[string]any{"verifiedAt": t0.Format(time.RFC3339)},
	}
	if diff := cmp.Diff(want, f.verifiedIn(t, "f1")); diff != "" {
		t.Errorf("verifiedIn (-want +got):\n%s", diff)
	}
	events, _ := f.kube.CoreV1().Events("shop").List(context.Background(), metav1.ListOptions{})
	if len(events.Items) != 1 || events.Items[0].Reason != api.ReasonFreightVerified {
		t.Errorf("events %+v, want one %s", events.Items, api.ReasonFreightVerified)
	}
}

// A Freight verified in the Stage by someone else (Kargo) keeps its entry:
// no write and no Event. A Freight that is gone is skipped.
func TestMarkLeavesFreightVerifiedByOthers(t *testing.T) {
	kargos := map[string]any{"prod": map[string]any{"verifiedAt": t0.Format(time.RFC3339)}}
	f := newFixture(t, freight("f1", kargos))
	if err := f.mark(t, "f1", "gone"); err != nil {
		t.Fatal(err)
	}
	for _, a := range f.client.Actions() {
		if a.GetVerb() == "patch" {
			t.Errorf("wrote %s %s over Kargo's mark", a.GetVerb(), a.GetResource().Resource)
		}
	}
	if events, _ := f.kube.CoreV1().Events("shop").List(context.Background(), metav1.ListOptions{}); len(events.Items) != 0 {
		t.Errorf("events %+v for a mark not ours, want none", events.Items)
	}
}

// A refused right holds the cycle back for markRetryAfter; other errors
// back off from markErrorRetryFirst, doubling; a new cycle is tried at once;
// a stored cycle is not tried again.
func TestMemoHoldsTriesBack(t *testing.T) {
	f := newFixture(t)
	_, ctx := ktesting.NewTestContext(t)
	rec := latch.Record{Phase: latch.PhaseLatched}
	cycle := rec.Cycle()
	var m Memo
	if !m.MayTry(cycle, t0) {
		t.Fatal("a first try is held back")
	}
	f.marker.Failed(ctx, f.stage, &m, rec, errors.New("etcd is unwell"), t0)
	f.marker.Failed(ctx, f.stage, &m, rec, errors.New("etcd is unwell"), t0)
	if got := m.RetryIn(t0); got != 2*markErrorRetryFirst {
		t.Errorf("after two errors, retry in %v, want %v", got, 2*markErrorRetryFirst)
	}
	if m.MayTry(cycle, t0) || !m.MayTry("another cycle", t0) {
		t.Error("the failed cycle is not held back, or a new one is")
	}
	f.marker.Failed(ctx, f.stage, &m, rec, apierrors.NewForbidden(kargo.FreightsResource.GroupResource(), "f1", nil), t0)
	if got := m.RetryIn(t0); got != markRetryAfter {
		t.Errorf("after a refusal, retry in %v, want %v", got, markRetryAfter)
	}
	if !m.MayTry(cycle, t0.Add(markRetryAfter)) {
		t.Error("the cycle is still held back after markRetryAfter")
	}
	m.Stored(cycle)
	if m.MayTry(cycle, t0.Add(time.Hour)) {
		t.Error("a cycle whose marks are stored is tried again")
	}
}
