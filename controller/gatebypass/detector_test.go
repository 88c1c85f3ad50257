package gatebypass

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/clock"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/controller/internal/eventually"
	"github.com/kargo-latch/kargo-latch/controller/report"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/metrics"
)

// project is Stage prod of project shop, paused a minute ago by StagePause
// hold, as the caches show it.
type project struct {
	kube    *kubefake.Clientset
	creates atomic.Int64 // GateBypassed Events the API server was asked to create
	synced  atomic.Bool  // the Stage and pause caches
	looks   atomic.Int64 // CachesSynced calls
}

func newProject() *project {
	p := &project{kube: kubefake.NewClientset()}
	p.synced.Store(true)
	p.kube.PrependReactor("create", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if e, ok := a.(k8stesting.CreateAction).GetObject().(*corev1.Event); ok && e.Reason == api.ReasonGateBypassed {
			p.creates.Add(1)
		}
		return false, nil, nil
	})
	return p
}

// detector is one operator's Detector over the project, counting into a
// registry of its own; it stops with the test.
func (p *project) detector(t *testing.T, dryRun bool) (*Detector, *metrics.Recorder) {
	t.Helper()
	paused := time.Now().Add(-time.Minute)
	hold := &v1alpha1.StagePause{
		ObjectMeta: metav1.ObjectMeta{Name: "hold", Namespace: "shop", CreationTimestamp: metav1.NewTime(paused)},
		Spec:       v1alpha1.StagePauseSpec{Stage: "prod", Reason: "Manual"},
	}
	rec := metrics.New(prometheus.NewRegistry(), "test")
	d := New(Config{
		Pauses:       func(string) []*v1alpha1.StagePause { return []*v1alpha1.StagePause{hold} },
		PausesSynced: p.synced.Load,
		CachesSynced: func() bool { p.looks.Add(1); return p.synced.Load() },
		Stage: func(key cache.ObjectName) (*kargo.Stage, bool, error) {
			return &kargo.Stage{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, UID: "stage-uid"}}, key.Name == "prod", nil
		},
		Reporter: report.New(p.kube, nil, clock.RealClock{}),
		Metrics:  rec, Clock: clock.RealClock{}, DryRun: dryRun,
	})
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	d.Start(ctx)
	return d, rec
}

// promotion is a Promotion to prod created age ago, by actor (Kargo's
// controller when empty).
func promotion(name, actor string, age time.Duration) *kargo.Promotion {
	p := &kargo.Promotion{Stage: "prod"}
	p.Name, p.Namespace, p.UID = name, "shop", types.UID(name+"-uid")
	p.CreationTimestamp = metav1.NewTime(time.Now().Add(-age).Truncate(time.Second))
	if actor != "" {
		p.Annotations = map[string]string{kargo.CreateActorAnnotation: actor}
	}
	return p
}

// seen is what a restarted operator's list shows: two auto-promotions
// admitted under the pause (one stamped with its requester), a person's
// hotfix, one queued before the pause, and one older than its Event lives.
func seen() []*kargo.Promotion {
	bypass := promotion("bypass", "", 10*time.Second)
	bypass.Annotations = map[string]string{api.RequestedByAnnotation: "kargo-shard-eu"}
	return []*kargo.Promotion{bypass,
		promotion("person", "kubernetes:dev", 10*time.Second),
		promotion("queued", "", 2*time.Minute),
		promotion("old", "", Horizon+time.Minute),
		promotion("controller", "controller:kargo-ctl", 5*time.Second),
	}
}

func counted(t *testing.T, rec *metrics.Recorder) float64 {
	t.Helper()
	m := &dto.Metric{}
	if err := rec.GateBypassed.WithLabelValues("shop", "prod").Write(m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// events lists the GateBypassed Events by the Promotion they name.
func (p *project) events(t *testing.T) map[string]corev1.Event {
	t.Helper()
	list, err := p.kube.CoreV1().Events("shop").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]corev1.Event{}
	for _, e := range list.Items {
		if e.Reason == api.ReasonGateBypassed {
			out[e.Related.Name] = e
		}
	}
	return out
}

// TestDetectorWarnsOncePerPromotion: of what a list shows, the two
// auto-promotions admitted under the pause get a Warning on their Stage
// each, and are counted; this Detector does not try them again. Another
// Detector over the same API (a restart, the other replica) tries, finds
// the Events there, and neither warns nor counts.
func TestDetectorWarnsOncePerPromotion(t *testing.T) {
	p := newProject()
	d, rec := p.detector(t, false)
	for _, promo := range seen() {
		d.Observe(promo)
	}
	eventually.True(t, func() bool { return counted(t, rec) == 2 })
	evs := p.events(t)
	if len(evs) != 2 {
		t.Errorf("GateBypassed about %v, want bypass and controller", evs)
	}
	for name, e := range evs {
		if e.Type != corev1.EventTypeWarning || e.InvolvedObject.Kind != "Stage" || e.InvolvedObject.Name != "prod" || e.InvolvedObject.UID != "stage-uid" ||
			e.Related.Kind != "Promotion" || e.Related.UID != types.UID(name+"-uid") {
			t.Errorf("%s Event on %+v about %+v, want a Warning on Stage prod (its UID) about the Promotion", e.Type, e.InvolvedObject, e.Related)
		}
		if !strings.Contains(e.Message, "StagePause hold (reason Manual)") {
			t.Errorf("message %q does not name the pause", e.Message)
		}
	}
	if _, ok := evs["bypass"]; !ok || !strings.Contains(evs["bypass"].Message, "by kargo-shard-eu,") {
		t.Errorf("the Event about bypass does not name its requester: %+v", evs["bypass"])
	}

	// Seen again, then a new bypass: the Detector judges in order, so the
	// new one's Event proves the first was dismissed without a try.
	d.Observe(seen()[0])
	d.Observe(promotion("bypass2", "", time.Second))
	eventually.True(t, func() bool { return counted(t, rec) == 3 })
	if n := p.creates.Load(); n != 3 {
		t.Errorf("%d GateBypassed creates, want 3: one for each bypass", n)
	}

	again, rec2 := p.detector(t, false)
	for _, promo := range append(seen(), promotion("bypass2", "", time.Second)) {
		again.Observe(promo)
	}
	eventually.True(t, func() bool { return p.creates.Load() == 6 })
	if n := len(p.events(t)); n != 3 {
		t.Errorf("%d GateBypassed Events after a restart, want still 3", n)
	}
	eventually.True(t, func() bool { again.mu.Lock(); defer again.mu.Unlock(); return !again.running })
	if got := counted(t, rec2); got != 0 {
		t.Errorf("the restarted Detector counted %v bypasses, want 0", got)
	}
}

// TestRefusedGateBypassReportIsRetried: the API server refuses the first
// GateBypassed Event of each bypass (a finished one, which no later event
// of its own brings back, and an unfinished one). Each is reported once
// Events can be written, and counted once.
func TestRefusedGateBypassReportIsRetried(t *testing.T) {
	p := newProject()
	var refused atomic.Int64
	p.kube.PrependReactor("create", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if e, ok := a.(k8stesting.CreateAction).GetObject().(*corev1.Event); ok && e.Reason == api.ReasonGateBypassed && refused.Load() < 2 {
			refused.Add(1)
			return true, nil, apierrors.NewInternalError(errors.New("etcd is unwell"))
		}
		return false, nil, nil
	})
	d, rec := p.detector(t, false)
	d.retryAfter = 20 * time.Millisecond
	finished := seen()[0]
	finished.Phase = "Succeeded"
	d.Observe(finished)
	d.Observe(seen()[4])
	eventually.True(t, func() bool { return counted(t, rec) == 2 })
	if n := refused.Load(); n != 2 {
		t.Errorf("%d reports refused, want the first 2", n)
	}
	if evs := p.events(t); len(evs) != 2 {
		t.Errorf("GateBypassed Events about %v, want one for each bypass", evs)
	}
}

// A --dry-run shadow reports nothing: the Event it made would keep the real
// operator from reporting and counting the bypass.
func TestDryRunReportsNothing(t *testing.T) {
	p := newProject()
	d, _ := p.detector(t, true)
	d.Observe(seen()[0])
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.queued) != 0 || len(d.reported) != 0 || p.creates.Load() != 0 {
		t.Errorf("dry run: queued %v, reported %v, %d creates; want nothing", d.queued, d.reported, p.creates.Load())
	}
}

// TestJudgementWaitsForTheCaches: before the caches have synced, nothing
// is dismissed (a pause not yet cached may cover it) and nothing reported
// (the Event needs the Stage's UID); once they have, the bypass is
// reported, and the Promotion queued before the pause is not.
func TestJudgementWaitsForTheCaches(t *testing.T) {
	p := newProject()
	p.synced.Store(false)
	d, rec := p.detector(t, false)
	d.Observe(seen()[0])
	d.Observe(seen()[2])
	d.mu.Lock()
	queued := len(d.queued)
	d.mu.Unlock()
	if queued != 2 {
		t.Fatalf("%d queued before the caches synced, want both", queued)
	}
	eventually.True(t, func() bool { return p.looks.Load() >= 3 }) // the judgement is waiting
	if n := p.creates.Load(); n != 0 {
		t.Errorf("%d GateBypassed creates before the caches synced, want 0", n)
	}
	p.synced.Store(true)
	eventually.True(t, func() bool { d.mu.Lock(); defer d.mu.Unlock(); return !d.running })
	if got, n := counted(t, rec), p.creates.Load(); got != 1 || n != 1 {
		t.Errorf("counted %v after %d creates, want the bypass alone", got, n)
	}
}

// A judgement waiting for caches that never sync ends when the operator
// stops: no goroutine outlives Start's context.
func TestStopEndsAWaitingJudgement(t *testing.T) {
	p := newProject()
	p.synced.Store(false)
	d, _ := p.detector(t, false)
	ctx, cancel := context.WithCancel(context.Background())
	d.Start(ctx)
	d.Observe(seen()[0])
	eventually.True(t, func() bool { return p.looks.Load() >= 3 }) // the judgement is waiting
	cancel()
	eventually.True(t, func() bool { d.mu.Lock(); defer d.mu.Unlock(); return !d.running })
	if n := p.creates.Load(); n != 0 {
		t.Errorf("%d GateBypassed creates after the stop, want 0", n)
	}
}
