package controller

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/metrics"
)

// fixture runs a Controller against a fake dynamic client. It proves the
// plumbing (informers → queue → sync → patch → Events) quickly; behaviour
// is proven on a real apiserver in test/e2e.
type fixture struct {
	t        *testing.T
	client   *dynamicfake.FakeDynamicClient
	kube     *kubefake.Clientset
	recorder *record.FakeRecorder
	patches  atomic.Int64
	reg      *prometheus.Registry
	clock    *delayClock // for idle: the delayed adds pending
	c        *Controller
}

func newFixture(t *testing.T, dryRun bool, stages ...*unstructured.Unstructured) *fixture {
	t.Helper()
	return newFixtureWith(t, dryRun, nil, stages...)
}

// newFixtureWith is newFixture over any objects (Stages, Freight), with a
// hook that may add reactors before the controller starts.
func newFixtureWith(t *testing.T, dryRun bool, setup func(*fixture), objects ...*unstructured.Unstructured) *fixture {
	t.Helper()
	logger, _ := ktesting.NewTestContext(t)
	return startFixture(t, dryRun, setup, logger, objects...)
}

// startFixture is newFixtureWith logging to logger.
func startFixture(t *testing.T, dryRun bool, setup func(*fixture), logger klog.Logger, objects ...*unstructured.Unstructured) *fixture {
	t.Helper()
	objs := make([]runtime.Object, len(objects))
	for i, s := range objects {
		objs[i] = s
	}
	f := &fixture{t: t, recorder: record.NewFakeRecorder(100), reg: prometheus.NewRegistry(), clock: newDelayClock()}
	f.client = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		kargo.StagesResource:         "StageList",
		kargo.PromotionsResource:     "PromotionList",
		v1alpha1.StagePausesResource: "StagePauseList",
		kargo.FreightsResource:       "FreightList",
	}, objs...)
	f.client.PrependReactor("patch", "stages", func(k8stesting.Action) (bool, runtime.Object, error) {
		f.patches.Add(1)
		return false, nil, nil
	})
	// The API server stamps what it creates; the fake does not.
	f.client.PrependReactor("create", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if o, ok := a.(k8stesting.CreateAction).GetObject().(metav1.Object); ok && o.GetCreationTimestamp().Time.IsZero() {
			o.SetCreationTimestamp(metav1.Now())
		}
		return false, nil, nil
	})
	f.kube = kubefake.NewClientset()
	if setup != nil {
		setup(f)
	}
	c, err := New(Config{
		Dynamic:  f.client,
		Kube:     f.kube,
		Recorder: f.recorder,
		Defaults: latch.Settings{LatchDeadline: time.Minute, DegradedGrace: time.Minute},
		DryRun:   dryRun,
		Metrics:  metrics.New(f.reg, "test"),
		// For idle: the queues' adds and finished work, and their delayed
		// adds.
		QueueMetrics: metrics.NewWorkqueueProvider(f.reg),
		Clock:        f.clock,
	})
	if err != nil {
		t.Fatal(err)
	}
	f.c = c
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return f
}

func healthyStage(name string, annotations map[string]any) *unstructured.Unstructured {
	md := map[string]any{"name": name, "namespace": "shop", "resourceVersion": "1"}
	if annotations != nil {
		md["annotations"] = annotations
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kargo.akuity.io/v1alpha1", "kind": "Stage", "metadata": md,
		"status": map[string]any{
			"health":         map[string]any{"status": "Healthy"},
			"lastPromotion":  map[string]any{"name": "p1", "finishedAt": "2026-11-29T10:00:00Z", "status": map[string]any{"phase": "Succeeded"}},
			"freightHistory": []any{map[string]any{"id": "F1"}},
		},
	}}
}

func (f *fixture) record(name string) latch.Record {
	u, err := f.client.Resource(kargo.StagesResource).Namespace("shop").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	r, err := latch.Decode(u.GetAnnotations()[api.StateAnnotation])
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

// cacheShowsServer reports whether the controller's cache shows the record
// the server holds for Stage name.
func (f *fixture) cacheShowsServer(name string) bool {
	u, err := f.client.Resource(kargo.StagesResource).Namespace("shop").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	cached, ok, err := f.c.stageByKey(cache.ObjectName{Namespace: "shop", Name: name})
	return err == nil && ok && cached.State.Value() == u.GetAnnotations()[api.StateAnnotation]
}

// syncs counts the Stage syncs the controller finished.
func (f *fixture) syncs() uint64 {
	mfs, err := f.reg.Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "kargo_latch_reconcile_duration_seconds" {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

// idleMoment is how long the controller's work must stay unchanged for it
// to count as idle: a watch event is delivered within the moment.
const idleMoment = 300 * time.Millisecond

// idleHorizon is how soon a delayed add must be due for idle to wait for
// it: a retry's backoff, a mark tried again (markErrorRetryFirst). Later
// ones are the time-based transitions of the fixture's settings (a minute
// away), which no test waits out.
const idleHorizon = 5 * time.Second

// idle waits until the controller has nothing queued, being synced or
// waiting in a queue to be added within idleHorizon (a retry with backoff),
// its work unchanged for idleMoment, as the e2e suite's waitIdle: every
// change it was told of before is then handled. A check that nothing
// happened follows a proof that the input was seen, then this; never a
// fixed sleep.
func (f *fixture) idle() {
	f.t.Helper()
	type work struct{ syncs, queuedIn, queuedOut float64 }
	read := func() work {
		var w work
		mfs, err := f.reg.Gather()
		if err != nil {
			f.t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				switch mf.GetName() {
				case "kargo_latch_reconcile_duration_seconds":
					w.syncs += float64(m.GetHistogram().GetSampleCount())
				case "kargo_latch_workqueue_adds_total":
					w.queuedIn += m.GetCounter().GetValue()
				case "kargo_latch_workqueue_work_duration_seconds":
					w.queuedOut += float64(m.GetHistogram().GetSampleCount())
				}
			}
		}
		return w
	}
	last, since := work{syncs: -1}, time.Now() // no read is like this one
	waitUntil(f.t, func() bool {
		w := read()
		if w.queuedIn != w.queuedOut || w != last || f.clock.dueWithin(idleHorizon) {
			last, since = w, time.Now()
			return false
		}
		return time.Since(since) >= idleMoment
	})
}

// waitEvent waits for an Event starting with prefix, passing over others.
func (f *fixture) waitEvent(prefix string) string {
	f.t.Helper()
	timeout := time.After(10 * time.Second)
	for {
		select {
		case e := <-f.recorder.Events:
			if strings.HasPrefix(e, prefix) {
				return e
			}
		case <-timeout:
			f.t.Fatalf("no Event %q", prefix)
			return ""
		}
	}
}

func TestSyncLatchesOnceAndWritesOnlyOnChange(t *testing.T) {
	f := newFixture(t, false, healthyStage("prod", nil))
	f.waitEvent("Normal HealthLatched")
	if got := f.record("prod").Phase; got != latch.PhaseLatched {
		t.Fatalf("phase = %s, want Latched", got)
	}
	// The echo of its own write, then a change it reads that changes
	// nothing: both synced, neither written.
	waitUntil(t, func() bool { return f.syncs() >= 2 })
	f.touchProd()
	waitUntil(t, func() bool { return f.syncs() >= 3 })
	if n := f.patches.Load(); n != 1 {
		t.Errorf("%d patches after %d syncs, want exactly 1", n, f.syncs())
	}
	select {
	case e := <-f.recorder.Events:
		t.Errorf("unexpected second Event %q", e)
	default:
	}
}

// touchProd changes an annotation of the Stage prod that the operator reads
// but that changes nothing of its judgement, so that it syncs the Stage
// again.
func (f *fixture) touchProd() {
	f.t.Helper()
	u, err := f.client.Resource(kargo.StagesResource).Namespace("shop").Get(context.Background(), "prod", metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	annotations := u.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations["example.com/touched"] = time.Now().String()
	u.SetAnnotations(annotations)
	if _, err := f.client.Resource(kargo.StagesResource).Namespace("shop").Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		f.t.Fatal(err)
	}
}

func TestDryRunWritesNothingButReports(t *testing.T) {
	f := newFixture(t, true, healthyStage("prod", map[string]any{api.LatchDeadlineAnnotation: "soon"}))
	f.waitEvent("Warning InvalidConfig")
	f.waitEvent("Normal HealthLatched")
	f.idle()
	if n := f.patches.Load(); n != 0 {
		t.Errorf("dry run patched %d times, want 0", n)
	}
	if r := f.record("prod"); !r.IsZero() {
		t.Errorf("dry run stored a record %+v", r)
	}
}

func TestFailureCreatesItsPauseOnce(t *testing.T) {
	prior := latch.Record{Phase: latch.PhaseLatched, Promotion: "p1", FreightID: "F1", ExaminedPromotion: "p1",
		PromotedAt: ptrTime(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)), LatchedAt: ptrTime(time.Date(2026, 11, 29, 10, 1, 0, 0, time.UTC))}
	stage := healthyStage("prod", map[string]any{api.PauseOnFailureAnnotation: "true", api.StateAnnotation: prior.Encode()})
	stage.Object["status"].(map[string]any)["lastPromotion"] = map[string]any{
		"name": "p2", "finishedAt": "2026-11-29T11:00:00Z", "status": map[string]any{"phase": "Failed"},
	}
	f := newFixture(t, false, stage)
	f.waitEvent("Warning LatchFailed")
	pauses, err := f.client.Resource(v1alpha1.StagePausesResource).Namespace("shop").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pauses.Items) != 1 {
		t.Fatalf("%d StagePauses, want 1", len(pauses.Items))
	}
	p := pauses.Items[0]
	r := f.record("prod")
	if r.Failure == nil || r.Failure.Pause != p.GetName() || !strings.HasPrefix(p.GetName(), "prod-promotionfailed-") {
		t.Errorf("pause %q, record failure %+v; want the record to name a prod-promotionfailed-… pause", p.GetName(), r.Failure)
	}
	if refs := p.GetOwnerReferences(); len(refs) != 1 || refs[0].Name != "prod" {
		t.Errorf("ownerReferences %+v, want the Stage", refs)
	}
	if got := p.GetLabels()[v1alpha1.ReasonLabel]; got != "PromotionFailed" {
		t.Errorf("reason label %q, want PromotionFailed", got)
	}
	waitUntil(t, func() bool { return len(f.stagePausedEvents()) == 1 })

	// Synced again, after the record is stored: nothing more is made.
	synced := f.syncs()
	f.touchProd()
	waitUntil(t, func() bool { return f.syncs() > synced })
	pauses, err = f.client.Resource(v1alpha1.StagePausesResource).Namespace("shop").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	events, err := f.kube.CoreV1().Events("shop").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pauses.Items) != 1 || len(events.Items) != 1 || events.Items[0].Reason != api.ReasonStagePaused {
		t.Errorf("after another sync: %d StagePauses and Events %+v, want one of each", len(pauses.Items), events.Items)
	}
}

func ptrTime(t time.Time) *time.Time { return &t }
