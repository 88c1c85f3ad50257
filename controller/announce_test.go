package controller

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/controller/report"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/metrics"
)

// failedStage is the latched Stage prod, pause-on-failure on, whose newest
// promotion p2 failed.
func failedStage() *unstructured.Unstructured {
	prior := latch.Record{Phase: latch.PhaseLatched, Promotion: "p1", FreightID: "F1", ExaminedPromotion: "p1",
		PromotedAt: ptrTime(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)), LatchedAt: ptrTime(time.Date(2026, 11, 29, 10, 1, 0, 0, time.UTC))}
	stage := healthyStage("prod", map[string]any{api.PauseOnFailureAnnotation: "true", api.StateAnnotation: prior.Encode()})
	stage.Object["status"].(map[string]any)["lastPromotion"] = map[string]any{
		"name": "p2", "finishedAt": "2026-11-29T11:00:00Z", "status": map[string]any{"phase": "Failed"},
	}
	return stage
}

// pausedStage is a Stage whose stored record says StagePause "hold" paused
// it createdAgo, with that pause.
func pausedStage(createdAgo time.Duration) (*unstructured.Unstructured, *unstructured.Unstructured) {
	rec := latch.Record{Phase: latch.PhaseLatched, Promotion: "p1", FreightID: "F1", ExaminedPromotion: "p1",
		PromotedAt: ptrTime(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)), LatchedAt: ptrTime(time.Date(2026, 11, 29, 10, 1, 0, 0, time.UTC)),
		Pauses: []string{"hold"}, PausedBy: &latch.PauseMark{Name: "hold", UID: "pause-uid", At: time.Now().Add(-createdAgo)}}
	stage := healthyStage("prod", map[string]any{api.StateAnnotation: rec.Encode()})
	stage.SetLabels(map[string]string{api.PausedLabel: "true"})
	stage.SetUID("stage-uid")
	pause := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "StagePause",
		"metadata": map[string]any{"name": "hold", "namespace": "shop", "uid": "pause-uid",
			"creationTimestamp": time.Now().Add(-createdAgo).UTC().Format(time.RFC3339)},
		"spec": map[string]any{"stage": "prod", "reason": "Manual"},
	}}
	return stage, pause
}

func (f *fixture) stagePausedEvents() []corev1.Event {
	f.t.Helper()
	events, err := f.kube.CoreV1().Events("shop").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	var out []corev1.Event
	for _, e := range events.Items {
		if e.Reason == api.ReasonStagePaused {
			out = append(out, e)
		}
	}
	return out
}

func (f *fixture) kubeActions(verb string) int {
	n := 0
	for _, a := range f.kube.Actions() {
		if a.GetVerb() == verb && a.GetResource().Resource == "events" {
			n++
		}
	}
	return n
}

// The StagePaused Event is made beside the store of the record: when its
// create is refused and the record is stored, the next sync finds the
// announcement owed, and makes it once.
func TestRefusedStagePausedEventIsMadeOnRetry(t *testing.T) {
	var refused atomic.Int32
	f := newFixtureWith(t, false, func(f *fixture) {
		f.kube.PrependReactor("create", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
			if refused.Add(1) == 1 {
				return true, nil, apierrors.NewServiceUnavailable("events are down")
			}
			return false, nil, nil
		})
	}, failedStage())
	waitUntil(t, func() bool { return len(f.stagePausedEvents()) == 1 })
	r := f.record("prod")
	if len(r.Pauses) != 1 || r.PausedBy == nil || r.PausedBy.Name != r.Pauses[0] {
		t.Errorf("record pauses %v, pausedBy %+v; want the failure's pause in both", r.Pauses, r.PausedBy)
	}
	f.idle()
	if n := len(f.stagePausedEvents()); n != 1 || refused.Load() != 2 {
		t.Errorf("%d StagePaused Events after %d creates, want 1 after 2 (one refused)", n, refused.Load())
	}
}

// A replica that starts with a stored pause, younger than the Event TTL,
// that it did not announce itself, makes sure its Event exists.
func TestRestartedReplicaMakesAnOwedAnnouncement(t *testing.T) {
	stage, pause := pausedStage(time.Minute)
	f := newFixtureWith(t, false, nil, stage, pause)
	waitUntil(t, func() bool { return len(f.stagePausedEvents()) == 1 })
	if n := f.patches.Load(); n != 0 {
		t.Errorf("%d Stage patches, want none: the record is as it should be", n)
	}
}

// ...even when the pause is gone by then: the Stage resumes, and the pause
// that paused it is announced once, from the record.
func TestRestartedReplicaAnnouncesAPauseDeletedMeanwhile(t *testing.T) {
	stage, _ := pausedStage(time.Minute)
	f := newFixtureWith(t, false, nil, stage)
	f.waitEvent("Normal StageResumed")
	waitUntil(t, func() bool { return len(f.stagePausedEvents()) == 1 })
	if e := f.stagePausedEvents()[0]; e.Message != "Paused by StagePause hold (deleted since)" {
		t.Errorf("StagePaused Event says %q", e.Message)
	}
	if r := f.record("prod"); len(r.Pauses) != 0 || r.PausedBy != nil {
		t.Errorf("record pauses %v, pausedBy %+v; want none after the resume", r.Pauses, r.PausedBy)
	}
}

// ...and makes no second one when it exists, and none when the pause is
// older than the Event TTL allows (a missing Event may have expired:
// announcing again would announce an old pause as new).
func TestRestartedReplicaDoesNotAnnounceTwice(t *testing.T) {
	t.Run("Event exists", func(t *testing.T) {
		stage, pause := pausedStage(time.Minute)
		var existing *corev1.Event
		f := newFixtureWith(t, false, func(f *fixture) {
			s := kargo.StageFromUnstructured(stage)
			p := &v1alpha1.StagePause{ObjectMeta: metav1.ObjectMeta{Name: "hold", UID: "pause-uid"}}
			existing = &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: report.OnceName(s, "paused", string(p.UID)+"\x00"+p.Name), Namespace: "shop"}, Reason: api.ReasonStagePaused}
			if _, err := f.kube.CoreV1().Events("shop").Create(context.Background(), existing, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			f.kube.ClearActions()
		}, stage, pause)
		waitUntil(t, func() bool { return f.kubeActions("create") == 1 })
		f.idle()
		if n := len(f.stagePausedEvents()); n != 1 || f.kubeActions("create") != 1 {
			t.Errorf("%d StagePaused Events after %d creates, want the Event %s alone, found by one create", n, f.kubeActions("create"), existing.Name)
		}
	})
	t.Run("pause older than the Event TTL", func(t *testing.T) {
		stage, pause := pausedStage(2 * announceWithin)
		f := newFixtureWith(t, false, nil, stage, pause)
		waitUntil(t, func() bool { return f.syncs() > 0 })
		f.idle()
		if n := len(f.kube.Actions()); n != 0 {
			t.Errorf("%d requests for Events, want none: %v", n, f.kube.Actions())
		}
	})
}

// A failure's pause is made before its record is stored, from a judgement
// on the cached Stage when the cache shows this replica's last write, and
// otherwise on the Stage read from the server.
func TestFailureReadsTheStageOnlyWhenTheCacheMayBeBehind(t *testing.T) {
	// stageGets counts the live reads of Stages made before the failure's
	// pause was created: those of the sync that judged the failure. A sync
	// that the pause's own event starts may read again, rightly, when the
	// cache does not show the record stored meanwhile yet.
	stageGets := func(f *fixture) int {
		n := 0
		for _, a := range f.client.Actions() {
			if a.GetVerb() == "create" && a.GetResource().Resource == "stagepauses" {
				break
			}
			if a.GetVerb() == "get" && a.GetResource().Resource == "stages" {
				n++
			}
		}
		return n
	}
	t.Run("fresh replica", func(t *testing.T) {
		f := newFixture(t, false, failedStage())
		f.waitEvent("Warning LatchFailed")
		if n := stageGets(f); n != 1 {
			t.Errorf("%d live reads of the Stage, want 1: this replica has not written it", n)
		}
	})
	t.Run("the cache shows this replica's write", func(t *testing.T) {
		stage := healthyStage("prod", map[string]any{api.PauseOnFailureAnnotation: "true"})
		f := newFixture(t, false, stage)
		f.waitEvent("Normal HealthLatched")
		waitUntil(t, func() bool { return f.syncs() >= 2 }) // the latch, then its echo
		waitUntil(t, func() bool { return f.cacheShowsServer("prod") })
		u, err := f.client.Resource(kargo.StagesResource).Namespace("shop").Get(context.Background(), "prod", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_ = unstructured.SetNestedMap(u.Object, map[string]any{
			"name": "p2", "finishedAt": "2026-11-29T11:00:00Z", "status": map[string]any{"phase": "Failed"},
		}, "status", "lastPromotion")
		if _, err := f.client.Resource(kargo.StagesResource).Namespace("shop").Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		f.client.ClearActions()
		f.waitEvent("Warning LatchFailed")
		if n := stageGets(f); n != 0 {
			t.Errorf("%d live reads of the Stage, want 0", n)
		}
		if r := f.record("prod"); r.Failure == nil || r.Failure.Pause == "" || r.PausedBy == nil || r.PausedBy.Name != r.Failure.Pause {
			t.Errorf("record failure %+v, pausedBy %+v; want the failure's pause", r.Failure, r.PausedBy)
		}
	})
}

// A sync on a cache that still holds the version of the Stage this
// replica's store replaced knows the cache is behind: it waits for that
// store's watch event rather than read the Stage again or judge the
// failure on the stale record.
func TestFailureOnACacheBehindItsOwnStoreWaitsForTheEvent(t *testing.T) {
	logger, ctx := ktesting.NewTestContext(t)
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		kargo.StagesResource:         "StageList",
		kargo.PromotionsResource:     "PromotionList",
		v1alpha1.StagePausesResource: "StagePauseList",
		kargo.FreightsResource:       "FreightList",
	}, failedStage())
	// No Stage event is ever delivered: the cache keeps the Stage as listed.
	client.PrependWatchReactor("stages", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, watch.NewFake(), nil
	})
	// The API server moves a Stage's resourceVersion on every write that
	// changes it; the fake does not.
	client.PrependReactor("patch", "stages", func(a k8stesting.Action) (bool, runtime.Object, error) {
		_, obj, err := k8stesting.ObjectReaction(client.Tracker())(a)
		if err != nil {
			return true, nil, err
		}
		u := obj.(*unstructured.Unstructured)
		rv, _ := strconv.Atoi(u.GetResourceVersion())
		u.SetResourceVersion(strconv.Itoa(rv + 1))
		return true, u, client.Tracker().Update(kargo.StagesResource, u, "shop")
	})
	c, err := New(Config{
		Dynamic: client, Kube: kubefake.NewClientset(), Recorder: record.NewFakeRecorder(100),
		Defaults: latch.Settings{LatchDeadline: time.Minute, DegradedGrace: time.Minute},
		Metrics:  metrics.New(prometheus.NewRegistry(), "test"),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(klog.NewContext(ctx, logger))
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	key := cache.NewObjectName("shop", "prod")
	if _, err := c.syncStage(ctx, key); err != nil {
		t.Fatal(err)
	}
	var r latch.Record
	if u, err := client.Resource(kargo.StagesResource).Namespace("shop").Get(ctx, "prod", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	} else if r, err = latch.Decode(u.GetAnnotations()[api.StateAnnotation]); err != nil || len(r.Pauses) != 1 {
		t.Fatalf("stored record %+v (%v), want it paused", r, err)
	}
	client.ClearActions()
	if _, err := c.syncStage(ctx, key); err != nil {
		t.Fatal(err)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() != "list" && a.GetVerb() != "watch" {
			t.Errorf("second sync on a cache behind its store: %s %s, want no request", a.GetVerb(), a.GetResource().Resource)
		}
	}
}

// An Event refused while the record named its pause, then the Stage resumed
// before Events could be written: this replica still owes the Event, and
// makes it once they can.
func TestRefusedStagePausedEventSurvivesAResume(t *testing.T) {
	var refuse atomic.Bool
	refuse.Store(true)
	f := newFixtureWith(t, false, func(f *fixture) {
		f.kube.PrependReactor("create", "events", func(k8stesting.Action) (bool, runtime.Object, error) {
			if refuse.Load() {
				return true, nil, apierrors.NewServiceUnavailable("events are down")
			}
			return false, nil, nil
		})
	}, failedStage())
	waitUntil(t, func() bool { r := f.record("prod"); return len(r.Pauses) == 1 })
	name := f.record("prod").Pauses[0]
	if err := f.client.Resource(v1alpha1.StagePausesResource).Namespace("shop").Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { r := f.record("prod"); return len(r.Pauses) == 0 && r.PausedBy == nil })
	if n := len(f.stagePausedEvents()); n != 0 {
		t.Fatalf("%d StagePaused Events while every create is refused", n)
	}
	refuse.Store(false)
	waitUntil(t, func() bool { return len(f.stagePausedEvents()) == 1 })
	if e := f.stagePausedEvents()[0]; !strings.Contains(e.Message, name) {
		t.Errorf("StagePaused Event says %q, want it to name %s", e.Message, name)
	}
}

// A replica that leads again may cache a Stage behind what another leader
// wrote meanwhile: each term forgets what this replica wrote, so that its
// first failure per Stage is judged on the Stage as the server has it.
func TestNewTermForgetsWhatThisReplicaWrote(t *testing.T) {
	ms := newMemos()
	m := ms.get(cache.NewObjectName("shop", "prod"))
	if m.writtenState.matches(`{"version":1}`) || m.writtenState.known {
		t.Fatalf("a new memo's writtenState is %+v, want unknown", m.writtenState)
	}
	m.writtenState, m.announced = digestOf(`{"version":1}`), "hold\x00uid"
	if !m.writtenState.matches(`{"version":1}`) || m.writtenState.matches(`{"version":1,"phase":"Latched"}`) {
		t.Fatal("a digest matches another record, or not its own")
	}
	ms.newTerm()
	if m.writtenState.matches(`{"version":1}`) || m.announced != "" {
		t.Errorf("after a new term: writtenState %+v, announced %q; want unknown and none", m.writtenState, m.announced)
	}
}
