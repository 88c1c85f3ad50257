package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// watcher is the separate observer of the bench: one raw watch per
// namespace of Stages, and one of Freight. It sees what anyone else would.
type watcher struct {
	dyn  dynamic.Interface
	mu   sync.Mutex
	cond *sync.Cond
	// per Stage key "namespace/name"
	state   map[string]string // last kargo-latch.io/state
	record  map[string]latch.Record
	label   map[string]bool   // paused label
	ping    map[string]string // bench/ping annotation
	pingAt  map[string]time.Time
	pauseAt map[string]time.Time
	// gateAt is when the watcher first saw a StagePause of the Stage (by
	// spec.stage): when the gate closed for it.
	gateAt  map[string]time.Time
	phase   map[string]latch.Phase
	latched map[string]int // by namespace
	paused  map[string]int // by namespace
	// stageWrites counts the operator's writes to Stages: a change of the
	// record or of the paused label.
	stageWrites int
	// verifiedIn holds, per "namespace/freight/stage", when the watcher
	// first saw status.verifiedIn.<stage> on the Freight and its verifiedAt.
	verifiedIn map[string]verifiedMark
	// marks counts verifiedIn entries that appeared on existing Freight:
	// outside the driver's set-up, only the operator writes them.
	marks int
	// restarts counts the watches that ended before the bench did.
	restarts int
}

type verifiedMark struct {
	seen       time.Time
	verifiedAt string
}

func newWatcher(dyn dynamic.Interface) *watcher {
	w := &watcher{dyn: dyn, state: map[string]string{}, record: map[string]latch.Record{}, label: map[string]bool{},
		ping: map[string]string{}, pingAt: map[string]time.Time{}, pauseAt: map[string]time.Time{}, gateAt: map[string]time.Time{},
		phase: map[string]latch.Phase{}, latched: map[string]int{}, paused: map[string]int{},
		verifiedIn: map[string]verifiedMark{}}
	w.cond = sync.NewCond(&w.mu)
	return w
}

// run watches the Stages, the Freight and the StagePauses of ns until ctx
// is done.
func (w *watcher) run(ctx context.Context, ns string) {
	go w.watch(ctx, kargo.FreightsResource, ns, w.observeFreight)
	go w.watch(ctx, v1alpha1.StagePausesResource, ns, w.observePause)
	w.watch(ctx, kargo.StagesResource, ns, w.observeStage)
}

// watch follows one resource of ns, observing every object added or
// modified. A watch the apiserver ends is resumed from the last
// resourceVersion seen; one it can no longer resume from (410 Gone: the
// watcher fell behind the apiserver's window) starts over with a list, whose
// objects are observed again. Both are reported, since the bench's figures
// assume the watcher keeps up.
func (w *watcher) watch(ctx context.Context, gvr schema.GroupVersionResource, ns string, observe func(string, *unstructured.Unstructured, time.Time)) {
	rv, why := "", ""
	for restarts := 0; ctx.Err() == nil; restarts++ {
		if restarts > 0 {
			w.mu.Lock()
			w.restarts++
			w.mu.Unlock()
			say("watcher: the watch of %s in %s ended (%s); resuming from resourceVersion %q", gvr.Resource, ns, why, rv)
		}
		wi, err := w.dyn.Resource(gvr).Namespace(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			why = err.Error()
			if expired(err) {
				rv = ""
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		why = "closed by the apiserver"
		for ev := range wi.ResultChan() {
			if ev.Type == watch.Error {
				err := apierrors.FromObject(ev.Object)
				why = err.Error()
				if expired(err) {
					rv = ""
				}
				continue
			}
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			rv = u.GetResourceVersion()
			if ev.Type == watch.Added || ev.Type == watch.Modified {
				observe(ns, u, time.Now())
			}
		}
	}
}

// expired reports whether a watch cannot resume from its resourceVersion.
func expired(err error) bool { return apierrors.IsResourceExpired(err) || apierrors.IsGone(err) }

func (w *watcher) observeStage(ns string, u *unstructured.Unstructured, at time.Time) {
	key := ns + "/" + u.GetName()
	st := u.GetAnnotations()[api.StateAnnotation]
	lbl := u.GetLabels()[api.PausedLabel] == "true"
	ping := u.GetAnnotations()["bench/ping"]
	w.mu.Lock()
	defer w.mu.Unlock()
	if prev, ok := w.state[key]; ok && (prev != st || w.label[key] != lbl) {
		w.stageWrites++
	}
	if lbl && !w.label[key] {
		w.paused[ns]++
		w.pauseAt[key] = at
	} else if !lbl && w.label[key] {
		w.paused[ns]--
	}
	if ping != w.ping[key] {
		w.pingAt[key+"="+ping] = at
	}
	if st != w.state[key] {
		r, _ := latch.Decode(st)
		w.record[key] = r
		if r.Phase != w.phase[key] {
			if w.phase[key] == latch.PhaseLatched {
				w.latched[ns]--
			}
			if r.Phase == latch.PhaseLatched {
				w.latched[ns]++
			}
			w.phase[key] = r.Phase
		}
	}
	w.state[key], w.label[key], w.ping[key] = st, lbl, ping
	w.cond.Broadcast()
}

func (w *watcher) observeFreight(ns string, u *unstructured.Unstructured, at time.Time) {
	verified, _, _ := unstructured.NestedMap(u.Object, "status", "verifiedIn")
	w.mu.Lock()
	defer w.mu.Unlock()
	for stage, v := range verified {
		key := ns + "/" + u.GetName() + "/" + stage
		if _, seen := w.verifiedIn[key]; seen {
			continue
		}
		verifiedAt, _, _ := unstructured.NestedString(v.(map[string]any), "verifiedAt")
		w.verifiedIn[key] = verifiedMark{seen: at, verifiedAt: verifiedAt}
		w.marks++
	}
	w.cond.Broadcast()
}

// observePause notes when a Stage's first StagePause was seen: the gate
// reads StagePauses as its parameters, so a pause is in force from then.
func (w *watcher) observePause(ns string, u *unstructured.Unstructured, at time.Time) {
	stage, _, _ := unstructured.NestedString(u.Object, "spec", "stage")
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, seen := w.gateAt[ns+"/"+stage]; !seen {
		w.gateAt[ns+"/"+stage] = at
	}
	w.cond.Broadcast()
}

// wake makes every waitFor look at its condition again, for a change
// outside the watches.
func (w *watcher) wake() {
	w.mu.Lock()
	w.cond.Broadcast()
	w.mu.Unlock()
}

func (w *watcher) waitFor(ctx context.Context, limit time.Duration, cond func(*watcher) bool) error {
	deadline := time.Now().Add(limit)
	stop := context.AfterFunc(ctx, func() { w.mu.Lock(); w.cond.Broadcast(); w.mu.Unlock() })
	defer stop()
	timer := time.AfterFunc(limit, func() { w.mu.Lock(); w.cond.Broadcast(); w.mu.Unlock() })
	defer timer.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for !cond(w) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("timed out after %v", limit)
		}
		w.cond.Wait()
	}
	return nil
}

func (w *watcher) waitPing(ctx context.Context, ns, name, value string) (time.Time, error) {
	var at time.Time
	err := w.waitFor(ctx, time.Minute, func(w *watcher) bool {
		t, ok := w.pingAt[ns+"/"+name+"="+value]
		at = t
		return ok
	})
	return at, err
}

func (w *watcher) waitPaused(ctx context.Context, ns, name string) (time.Time, error) {
	var at time.Time
	err := w.waitFor(ctx, time.Minute, func(w *watcher) bool {
		t, ok := w.pauseAt[ns+"/"+name]
		at = t
		return ok && w.label[ns+"/"+name]
	})
	return at, err
}

// waitGateClosed waits until a StagePause of the Stage was seen.
func (w *watcher) waitGateClosed(ctx context.Context, ns, name string) (time.Time, error) {
	var at time.Time
	err := w.waitFor(ctx, time.Minute, func(w *watcher) bool {
		t, ok := w.gateAt[ns+"/"+name]
		at = t
		return ok
	})
	return at, err
}

// waitRecord waits until the Stage's record, as the watcher last saw it,
// satisfies cond, and returns that record.
func (w *watcher) waitRecord(ctx context.Context, ns, name string, cond func(latch.Record) bool) (latch.Record, error) {
	var r latch.Record
	err := w.waitFor(ctx, time.Minute, func(w *watcher) bool {
		r = w.record[ns+"/"+name]
		return cond(r)
	})
	if err != nil {
		return r, fmt.Errorf("stage %s/%s: record %+v: %w", ns, name, r, err)
	}
	return r, nil
}

// waitVerified waits until the watcher sees the Freight verified in the
// Stage.
func (w *watcher) waitVerified(ctx context.Context, ns, freight, stage string) (verifiedMark, error) {
	var m verifiedMark
	err := w.waitFor(ctx, time.Minute, func(w *watcher) bool {
		var ok bool
		m, ok = w.verifiedIn[ns+"/"+freight+"/"+stage]
		return ok
	})
	if err != nil {
		return m, fmt.Errorf("freight %s/%s never verified in Stage %s: %w", ns, freight, stage, err)
	}
	return m, nil
}

// operatorWrites is how many writes the operator made so far: to Stages,
// and verifiedIn marks on Freight.
func (w *watcher) operatorWrites() (stages, marks int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stageWrites, w.marks
}

// restarted is how many watches ended before the bench did.
func (w *watcher) restarted() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.restarts
}

// marked reports whether a record says the cycle's Freight is verified.
func marked(r latch.Record, freight string) bool { return slices.Contains(r.Marked, freight) }
