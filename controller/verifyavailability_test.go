package controller

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/controller/verification"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/metrics"
)

// runsRefusal says how the fake API server answers a list or watch of
// AnalysisRuns in a namespace ("" for all): nil serves it.
type runsRefusal func(ns string) error

// verifier is a Controller with --enable-verify-on-latch across all
// namespaces, over a fake API server whose AnalysisRuns answer as refuse
// says (changeable while it runs).
type verifier struct {
	t        *testing.T
	c        *Controller
	recorder *record.FakeRecorder
	metrics  *metrics.Recorder
	reg      *prometheus.Registry
	refuse   atomic.Pointer[runsRefusal]
	ctx      context.Context
	started  chan error
}

func newVerifier(t *testing.T, refuse runsRefusal, stages ...*unstructured.Unstructured) *verifier {
	t.Helper()
	v := &verifier{t: t, recorder: record.NewFakeRecorder(100), reg: prometheus.NewRegistry(), started: make(chan error, 1)}
	v.metrics = metrics.New(v.reg, "test")
	v.refuse.Store(&refuse)
	objs := make([]runtime.Object, len(stages))
	for i, s := range stages {
		objs[i] = s
	}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		kargo.StagesResource:              "StageList",
		kargo.PromotionsResource:          "PromotionList",
		v1alpha1.StagePausesResource:      "StagePauseList",
		verification.AnalysisRunsResource: "AnalysisRunList",
	}, objs...)
	refusal := func(ns string) error { return (*v.refuse.Load())(ns) }
	client.PrependReactor("list", "analysisruns", func(a k8stesting.Action) (bool, runtime.Object, error) {
		err := refusal(a.GetNamespace())
		return err != nil, nil, err
	})
	client.PrependWatchReactor("analysisruns", func(a k8stesting.Action) (bool, watch.Interface, error) {
		err := refusal(a.GetNamespace())
		return err != nil, nil, err
	})
	c, err := New(Config{
		Dynamic: client, Kube: kubefake.NewClientset(), Recorder: v.recorder, Metrics: v.metrics,
		Defaults:         latch.Settings{LatchDeadline: time.Minute, DegradedGrace: time.Minute},
		VerifyOnLatch:    true,
		CacheSyncTimeout: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	v.c = c
	logger, _ := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	v.ctx = ctx
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.Start(ctx); err != nil {
			v.started <- err
			return
		}
		v.started <- nil
		c.RunWorkers(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return v
}

// waitStarted fails the test when Start gave up.
func (v *verifier) waitStarted() {
	v.t.Helper()
	select {
	case err := <-v.started:
		if err != nil {
			v.t.Fatalf("Start: %v", err)
		}
	case <-time.After(10 * time.Second):
		v.t.Fatal("Start has not returned")
	}
}

// waitAvailable looks at the run caches until verify-on-latch's gauge of
// project ns says want.
func (v *verifier) waitAvailable(ns string, want float64) {
	v.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		v.c.checkRunCaches(v.ctx)
		got, ok := v.available()[ns]
		if ok && got == want {
			return
		}
		if time.Now().After(deadline) {
			v.t.Fatalf("verify_on_latch_available{project=%q} = %v, want %v", ns, got, want)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// available is kargo_latch_verify_on_latch_available, by project.
func (v *verifier) available() map[string]float64 {
	v.t.Helper()
	mfs, err := v.reg.Gather()
	if err != nil {
		v.t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "kargo_latch_verify_on_latch_available" {
			continue
		}
		for _, m := range mf.GetMetric() {
			out[projectOf(m)] = m.GetGauge().GetValue()
		}
	}
	return out
}

func projectOf(m *dto.Metric) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == metrics.LabelProject {
			return l.GetValue()
		}
	}
	return ""
}

// waitEvent waits for an Event starting with prefix and saying what.
func (v *verifier) waitEvent(prefix, what string) string {
	v.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e := <-v.recorder.Events:
			if strings.HasPrefix(e, prefix) && strings.Contains(e, what) {
				return e
			}
		case <-timeout:
			v.t.Fatalf("no Event %q saying %q", prefix, what)
			return ""
		}
	}
}

// verifyingStage is a Healthy Stage in ns that opts into verify-on-latch and
// has a configured verification.
func verifyingStage(ns, name string) *unstructured.Unstructured {
	s := healthyStage(name, map[string]any{api.VerifyOnLatchAnnotation: "true", api.PauseOnFailureAnnotation: "true"})
	s.SetNamespace(ns)
	s.Object["spec"] = map[string]any{"verification": map[string]any{"analysisTemplates": []any{map[string]any{"name": "web-check"}}}}
	return s
}

func notFound(string) error {
	return apierrors.NewNotFound(verification.AnalysisRunsResource.GroupResource(), "")
}

// TestVerifyOnLatchWithoutItsCRDsStartsAndRecovers: without Argo Rollouts'
// CRDs, Start returns (the core's caches synced), the operator is ready
// with a note, the Stage is warned that verify-on-latch is off; once the
// CRDs are served, verify-on-latch is available again without a restart.
func TestVerifyOnLatchWithoutItsCRDsStartsAndRecovers(t *testing.T) {
	v := newVerifier(t, notFound, verifyingStage("shop", "test"))
	v.waitStarted()
	if err := v.c.Ready(); err != nil {
		t.Errorf("Ready: %v; want ready, verify-on-latch's problem aside", err)
	}
	v.waitAvailable("shop", 0)
	ev := v.waitEvent("Warning "+api.ReasonVerificationUnavailable, "Argo Rollouts' CRD analysisruns.argoproj.io is not installed")
	if !strings.Contains(ev, "the latch and the pauses work as usual") {
		t.Errorf("Event %q does not say the core carries on", ev)
	}
	if notes := strings.Join(v.c.ReadyNotes(), "\n"); !strings.Contains(notes, "verify-on-latch is unavailable: Argo Rollouts' CRD analysisruns.argoproj.io is not installed") {
		t.Errorf("ReadyNotes = %q, want verify-on-latch unavailable for want of the CRD", notes)
	}
	if v.c.watchesRunsIn("shop") {
		t.Error("the runs of shop count as watched")
	}

	served := runsRefusal(func(string) error { return nil })
	v.refuse.Store(&served)
	v.waitAvailable("shop", 1) // the reflector retries within its backoff
	if notes := v.c.ReadyNotes(); len(notes) != 0 {
		t.Errorf("ReadyNotes = %q once the CRDs are served, want none", notes)
	}
	if !v.c.watchesRunsIn("shop") {
		t.Error("the runs of shop are not watched once the CRDs are served")
	}
}

// TestRunCachesPerProjectWhenClusterWideRefused: rights bound in one project
// only. The all-namespaces cache is refused; a cache per project whose
// Stages opt in takes over: verify-on-latch is on where it syncs, off and
// warned where it is refused too.
func TestRunCachesPerProjectWhenClusterWideRefused(t *testing.T) {
	forbidden := func(ns string) error {
		if ns == "shop" {
			return nil
		}
		return apierrors.NewForbidden(verification.AnalysisRunsResource.GroupResource(), "", errors.New("no rights in "+ns))
	}
	v := newVerifier(t, forbidden, verifyingStage("shop", "test"), verifyingStage("other", "test"), healthyStage("plain", nil))
	v.waitStarted()
	v.waitAvailable("shop", 1)
	v.waitAvailable("other", 0)
	v.waitEvent("Warning "+api.ReasonVerificationUnavailable, "in namespace other")
	if !v.c.watchesRunsIn("shop") || v.c.watchesRunsIn("other") {
		t.Errorf("runs watched: shop %v, other %v; want shop only", v.c.watchesRunsIn("shop"), v.c.watchesRunsIn("other"))
	}
	v.c.runs.mu.Lock()
	projects := len(v.c.runs.projects)
	v.c.runs.mu.Unlock()
	if projects != 2 {
		t.Errorf("%d per-project caches, want 2: the projects whose Stages opt in", projects)
	}
	if n := len(v.available()); n != 2 {
		t.Errorf("%d verify_on_latch_available series, want 2 (no Stage of plain opts in)", n)
	}
	if err := v.c.Ready(); err != nil {
		t.Errorf("Ready: %v", err)
	}

	// The ClusterRole bound cluster-wide at last: the all-namespaces cache
	// serves every project, and the per-project ones stop.
	served := runsRefusal(func(string) error { return nil })
	v.refuse.Store(&served)
	v.waitAvailable("other", 1)
	deadline := time.Now().Add(30 * time.Second)
	for {
		v.c.checkRunCaches(v.ctx)
		v.c.runs.mu.Lock()
		projects = len(v.c.runs.projects)
		v.c.runs.mu.Unlock()
		if projects == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d per-project caches left once the all-namespaces one serves", projects)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDiagnoseAnalysisRunsNamesArgoRollouts: the problems of verify-on-latch's
// caches point at Argo Rollouts' CRDs and at the verify-on-latch rights,
// not at Kargo or the core's ClusterRole.
func TestDiagnoseAnalysisRunsNamesArgoRollouts(t *testing.T) {
	gvr := verification.AnalysisRunsResource
	name := selectedCacheName(gvr, "shop", verification.OwnRunsSelector)
	text, known := diagnose(gvr, name, notFound(""))
	if !known || !strings.Contains(text, "Argo Rollouts' CRD analysisruns.argoproj.io is not installed") || !strings.Contains(text, "--enable-verify-on-latch") {
		t.Errorf("404: %q (known %v)", text, known)
	}
	forbidden := apierrors.NewForbidden(gvr.GroupResource(), "", errors.New("no rights"))
	text, known = diagnose(gvr, name, forbidden)
	if !known || !strings.Contains(text, "in namespace shop") || !strings.Contains(text, "ClusterRole kargo-latch-verify-on-latch") {
		t.Errorf("403: %q (known %v)", text, known)
	}
}
