package controller

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// heldWatch passes on the events of a watch only once released: a watch
// stream that lags behind another.
type heldWatch struct {
	inner   watch.Interface
	out     chan watch.Event
	release <-chan struct{}
}

func holdWatch(inner watch.Interface, release <-chan struct{}) *heldWatch {
	h := &heldWatch{inner: inner, out: make(chan watch.Event, 100), release: release}
	go func() {
		defer close(h.out)
		var pending []watch.Event
		in := inner.ResultChan()
		for {
			select {
			case e, ok := <-in:
				if !ok {
					return
				}
				pending = append(pending, e)
			case <-release:
				for _, e := range pending {
					h.out <- e
				}
				for e := range in {
					h.out <- e
				}
				return
			}
		}
	}()
	return h
}

func (h *heldWatch) Stop()                          { h.inner.Stop() }
func (h *heldWatch) ResultChan() <-chan watch.Event { return h.out }

// Issue 24 §3: the StagePause watch lags the Stage watch. The operator's
// own new pause reaches its cache only after the Stage update that names
// it, and after more Stage updates: no sync in between resumes the Stage
// (no StageResumed, no resume counted, no label removed, no refresh
// requested).
func TestNoFalseResumeWhileThePauseCacheLags(t *testing.T) {
	prior := latch.Record{Phase: latch.PhaseLatched, Promotion: "p1", FreightID: "F1", ExaminedPromotion: "p1",
		PromotedAt: ptrTime(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)), LatchedAt: ptrTime(time.Date(2026, 11, 29, 10, 1, 0, 0, time.UTC))}
	stage := healthyStage("prod", map[string]any{api.PauseOnFailureAnnotation: "true", api.StateAnnotation: prior.Encode()})
	stage.Object["status"].(map[string]any)["lastPromotion"] = map[string]any{
		"name": "p2", "finishedAt": "2026-11-29T11:00:00Z", "status": map[string]any{"phase": "Failed"},
	}
	release := make(chan struct{})
	var mu sync.Mutex
	var unlabels, refreshes int
	f := newFixtureWith(t, false, func(f *fixture) {
		f.client.PrependWatchReactor("stagepauses", func(a k8stesting.Action) (bool, watch.Interface, error) {
			w, err := f.client.Tracker().Watch(a.GetResource(), a.GetNamespace())
			if err != nil {
				return true, nil, err
			}
			return true, holdWatch(w, release), nil
		})
		f.client.PrependReactor("patch", "stages", func(a k8stesting.Action) (bool, runtime.Object, error) {
			body := string(a.(k8stesting.PatchAction).GetPatch())
			mu.Lock()
			defer mu.Unlock()
			if strings.Contains(body, `"`+api.PausedLabel+`":null`) {
				unlabels++
			}
			if strings.Contains(body, kargo.RefreshAnnotation) {
				refreshes++
			}
			return false, nil, nil
		})
	}, stage)
	defer func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}()
	f.waitEvent("Warning LatchFailed")
	waitUntil(t, func() bool { r := f.record("prod"); return len(r.Pauses) == 1 && f.cacheShowsServer("prod") })
	pause := f.record("prod").Pauses[0]

	// The Stage changes twice more while its pause is still unknown to the
	// cache: each change is synced.
	for range 2 {
		synced := f.syncs()
		f.touchProd()
		waitUntil(t, func() bool { return f.syncs() > synced })
	}
	f.idle()
	if _, ok, _ := f.c.pauseByKey(cacheKey(pause)); ok {
		t.Fatal("the pause reached the cache: the test lost its lag")
	}
	check := func(when string) {
		t.Helper()
		for done := false; !done; {
			select {
			case e := <-f.recorder.Events:
				if strings.Contains(e, api.ReasonStageResumed) {
					t.Errorf("%s: Event %q", when, e)
				}
			default:
				done = true
			}
		}
		if r := f.record("prod"); len(r.Pauses) != 1 || r.Pauses[0] != pause {
			t.Errorf("%s: record pauses %v, want [%s]", when, r.Pauses, pause)
		}
		u, err := f.client.Resource(kargo.StagesResource).Namespace("shop").Get(context.Background(), "prod", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if u.GetLabels()[api.PausedLabel] != "true" {
			t.Errorf("%s: paused label %q", when, u.GetLabels()[api.PausedLabel])
		}
		if got := f.counterSum("kargo_latch_resumes_total", nil); got != 0 {
			t.Errorf("%s: resumes_total = %v, want 0", when, got)
		}
		mu.Lock()
		defer mu.Unlock()
		if unlabels != 0 || refreshes != 0 {
			t.Errorf("%s: %d patches removed the paused label, %d requested a refresh; want none", when, unlabels, refreshes)
		}
	}
	check("while the pause watch lags")

	close(release)
	waitUntil(t, func() bool { _, ok, _ := f.c.pauseByKey(cacheKey(pause)); return ok })
	f.idle()
	check("once it caught up")
}

// TestNoFalseResumeOnTheLiveRecheck: a new leadership term (the memo of
// this replica's writes is reset) while both caches lag the failure's pause
// and the record that names it. The cached record still shows the failure
// unpaused, so the sync re-reads the Stage live before pausing; the live
// record names a pause the pause cache lacks, which is read too: no
// resume is judged, the record keeps naming the pause.
func TestNoFalseResumeOnTheLiveRecheck(t *testing.T) {
	prior := latch.Record{Phase: latch.PhaseLatched, Promotion: "p1", FreightID: "F1", ExaminedPromotion: "p1",
		PromotedAt: ptrTime(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)), LatchedAt: ptrTime(time.Date(2026, 11, 29, 10, 1, 0, 0, time.UTC))}
	stage := healthyStage("prod", map[string]any{api.PauseOnFailureAnnotation: "true", api.StateAnnotation: prior.Encode()})
	stage.Object["status"].(map[string]any)["lastPromotion"] = map[string]any{
		"name": "p2", "finishedAt": "2026-11-29T11:00:00Z", "status": map[string]any{"phase": "Failed"},
	}
	release := make(chan struct{})
	f := newFixtureWith(t, false, func(f *fixture) {
		for _, resource := range []string{"stagepauses", "stages"} {
			f.client.PrependWatchReactor(resource, func(a k8stesting.Action) (bool, watch.Interface, error) {
				w, err := f.client.Tracker().Watch(a.GetResource(), a.GetNamespace())
				if err != nil {
					return true, nil, err
				}
				return true, holdWatch(w, release), nil
			})
		}
	}, stage)
	defer close(release)
	f.waitEvent("Warning LatchFailed")
	waitUntil(t, func() bool { return len(f.record("prod").Pauses) == 1 })
	pause := f.record("prod").Pauses[0]
	f.idle()
	if _, ok, _ := f.c.pauseByKey(cacheKey(pause)); ok {
		t.Fatal("the pause reached the cache: the test lost its lag")
	}
	drain := func() (resumed []string) {
		for {
			select {
			case e := <-f.recorder.Events:
				if strings.Contains(e, api.ReasonStageResumed) {
					resumed = append(resumed, e)
				}
			default:
				return resumed
			}
		}
	}
	drain()

	f.c.memos.newTerm()
	synced := f.syncs()
	f.c.enqueue(cache.ObjectName{Namespace: "shop", Name: "prod"})
	waitUntil(t, func() bool { return f.syncs() > synced })
	f.idle()
	if resumed := drain(); len(resumed) > 0 {
		t.Errorf("the sync after a new term resumed the Stage: %q", resumed)
	}
	if r := f.record("prod"); len(r.Pauses) != 1 || r.Pauses[0] != pause {
		t.Errorf("record pauses %v, want [%s]", r.Pauses, pause)
	}
	if got := f.counterSum("kargo_latch_resumes_total", nil); got != 0 {
		t.Errorf("resumes_total = %v, want 0", got)
	}
}
