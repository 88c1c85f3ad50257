package controller

import (
	"reflect"

	"k8s.io/client-go/tools/cache"

	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

func (c *Controller) enqueueStage(obj any) {
	if key, err := cache.DeletionHandlingObjectToName(obj); err == nil {
		c.enqueue(key)
	}
}

// updateStage skips updates that change nothing kargo-latch reads: Kargo
// rewrites conditions and health output on every pass. A resync (same
// resourceVersion) always goes through. An update that shows a new failure
// is urgent: its sync owes a pause, which closes the gate, and must not
// wait behind the health flaps of busy Stages.
func (c *Controller) updateStage(oldObj, newObj any) {
	o, ok1 := oldObj.(*kargo.Stage)
	n, ok2 := newObj.(*kargo.Stage)
	if ok1 && ok2 && o.ResourceVersion != n.ResourceVersion && sameView(o, n) {
		return
	}
	key, err := cache.DeletionHandlingObjectToName(newObj)
	if err != nil {
		return
	}
	if ok1 && ok2 && showsNewFailure(o, n) {
		c.enqueueUrgent(key)
		return
	}
	c.enqueue(key)
}

// failure is what a Stage's status shows that fails its cycle at once, as
// the latch judges it: a last promotion, or Kargo's verification. Health is
// left out: an Unhealthy Stage fails only after the degraded grace, whose
// end comes back as a due requeue (queue.Worker), and Kargo reports Unknown
// during every promotion. It only orders the queue; the latch judges the
// sync as any other, so a mistaken mark costs other Stages a little
// latency and nothing more.
type failure struct{ promotion, verification [2]string } // name or ID, and phase

var noFailure [2]string

func failureOf(s *kargo.Stage) failure {
	var f failure
	st := s.Status
	if st == nil {
		return f
	}
	if lp := st.LastPromotion; lp != nil && latch.PromotionPhase(lp.Phase).FailsCycle() {
		f.promotion = [2]string{lp.Name, lp.Phase}
	}
	if v := verificationOf(st.Verification); v != nil && v.FailsCycle() {
		f.verification = [2]string{v.ID, string(v.Phase)}
	}
	return f
}

// showsNewFailure reports whether n shows a failure that o did not.
func showsNewFailure(o, n *kargo.Stage) bool {
	was, is := failureOf(o), failureOf(n)
	return is.promotion != noFailure && is.promotion != was.promotion ||
		is.verification != noFailure && is.verification != was.verification
}

func sameView(a, b *kargo.Stage) bool {
	return a.HasVerification == b.HasVerification &&
		a.State == b.State && // equal records pack alike
		reflect.DeepEqual(a.Labels, b.Labels) &&
		reflect.DeepEqual(a.Annotations, b.Annotations) &&
		reflect.DeepEqual(a.DeletionTimestamp, b.DeletionTimestamp) &&
		reflect.DeepEqual(a.Status, b.Status)
}

// updatePromotion enqueues the Promotion's Stage on a change. A resync (the
// informer hands the cached object as both old and new; only unfinished
// Promotions, and those a drain aborted, are cached) only looks again for a gate bypass: resyncing
// every cached Promotion's Stage would sync every busy Stage in a burst
// each Resync, delaying every reaction behind it.
func (c *Controller) updatePromotion(oldObj, newObj any) {
	if oldObj == newObj {
		if p, ok := newObj.(*kargo.Promotion); ok {
			c.gateBypass.Observe(p)
		}
		return
	}
	c.enqueuePromotionStage(newObj)
}

// enqueuePromotionStage enqueues the Stage a Promotion is for: on its
// creation, and when it ends or goes (it then leaves the cache of
// unfinished Promotions as a delete: controller/promotioncache). A
// Promotion without spec.stage (Kargo's schema requires one) concerns no
// Stage. Before that, it looks whether the Promotion passed a pause gate
// that should have stopped it (controller/gatebypass): a sync of the Stage
// that follows thus follows that look too.
func (c *Controller) enqueuePromotionStage(obj any) {
	tomb, gone := obj.(cache.DeletedFinalStateUnknown)
	if gone {
		obj = tomb.Obj
	}
	p, ok := obj.(*kargo.Promotion)
	if !ok {
		return
	}
	if !gone {
		c.gateBypass.Observe(p)
	}
	if p.Stage != "" {
		c.enqueue(cache.NewObjectName(p.Namespace, p.Stage))
	}
}
