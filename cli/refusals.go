package cli

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// A wait's informers retry a refused list or watch for ever, without a
// word: a right revoked or a token expired in the middle of a wait would
// hang it, and reachability counts a refusal as an answer. So each source
// reports its refusals here, and the wait acts on them as it does when it
// starts: a refusal of the credentials (401), or of a source the wait
// cannot do without (the Stage, its StagePauses: 403 or 404), ends it with
// the API server's message; a source it can do without (Promotions,
// Freight) is dropped, with a warning, as when it cannot be read at start.
//
// A refusal ends the wait only when a read of the same source, made
// refusalGrace later, is refused too: a kube-apiserver that has just
// restarted may refuse for a moment while its authenticators (OIDC) and
// its RBAC caches start, and a wait rides a restart out.

// refusalGrace is how long after a refusal that would end the wait the
// wait reads the source again, to confirm it.
const refusalGrace = 2 * time.Second

// refusal is one request of a source that the API server refused.
type refusal struct {
	resource string
	required bool
	err      error
	// readAgain reads the source once, as its informer lists it.
	readAgain func(context.Context) error
}

// ends reports whether the wait cannot go on after the refusal.
func (r refusal) ends() bool { return r.required || apierrors.IsUnauthorized(r.err) }

// isRefusal reports whether err is the API server refusing a request: the
// credentials (401), the right (403), or the resource (404).
func isRefusal(err error) bool {
	return apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err) || apierrors.IsNotFound(err)
}

// refusals collects the refusals heard by the sources' goroutines until the
// wait's loop takes them.
type refusals struct {
	mu      sync.Mutex
	pending []refusal
}

func (r *refusals) add(x refusal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pending = append(r.pending, x)
}

func (r *refusals) take() []refusal {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.pending
	r.pending = nil
	return out
}

// hearing is what the source spec of the waiter hears every request with:
// reachability hears them all, and a refusal is kept for the loop, which it
// wakes.
func (w *waiter) hearing(spec sourceSpec, required bool) func(error) {
	return func(err error) {
		w.reach.heard(err)
		if isRefusal(err) {
			w.refused.add(refusal{resource: spec.gvr.Resource, required: required, err: err, readAgain: spec.readOnce})
			w.reach.notify()
		}
	}
}

// actOnRefusals ends the wait on the first refusal it cannot go on after,
// once confirmed, and drops each optional source refused, saying so. A
// source dropped already (or never started) is not dropped again.
func (w *waiter) actOnRefusals(ctx context.Context) error {
	for _, r := range w.refused.take() {
		switch {
		case r.ends():
			if err := w.confirmRefusal(ctx, r); err != nil {
				return fmt.Errorf("%s: %w", w.name(), err)
			}
		case r.resource == resourcePromotions && w.promotions != nil:
			w.promotions.stop()
			w.promotions = nil
			w.warnWithout(r.err, resourcePromotions, w.withoutPromotions())
		case r.resource == resourceFreights && !w.freight.off:
			w.freightOff(fmt.Errorf("%s", apiMessage(r.err)))
		}
	}
	return nil
}

// confirmRefusal reads the refused source again refusalGrace later: the
// refusal then, if there is one, ends the wait (nil when the wait ended
// meanwhile: its end says why).
func (w *waiter) confirmRefusal(ctx context.Context, r refusal) error {
	select {
	case <-ctx.Done():
		return nil
	case <-time.After(refusalGrace):
	}
	r.err = r.readAgain(ctx) // ends() judges the new answer
	if isRefusal(r.err) && r.ends() {
		return w.refusedError(r.err, r.resource)
	}
	return nil // it answers, or does not answer at all (reachability's to judge)
}

// refusedError says what the API server refused, and what the wait needs.
func (w *waiter) refusedError(err error, resource string) error {
	switch {
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("unauthorized: the API server no longer accepts the credentials (reading %s in namespace %s): %s", resource, w.ns, apiMessage(err))
	case apierrors.IsForbidden(err):
		return fmt.Errorf("forbidden: wait needs get, list and watch on %s in namespace %s: %s", resource, w.ns, apiMessage(err))
	case apierrors.IsNotFound(err):
		return fmt.Errorf("not found: the API server does not serve %s in namespace %s: %s", resource, w.ns, apiMessage(err))
	}
	return err
}

// The resources of the waiter's sources, as refusals name them.
const (
	resourceStages      = "stages"
	resourceStagePauses = "stagepauses"
	resourcePromotions  = "promotions"
	resourceFreights    = "freights"
)
