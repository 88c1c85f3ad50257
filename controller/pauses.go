package controller

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/controller/pausing"
	"github.com/kargo-latch/kargo-latch/kargo"
)

// transformPause turns the dynamic informer's unstructured StagePauses into
// typed ones (pausing.FromObject).
var transformPause = kargo.Transform(pausing.FromObject)

// pausesIn lists the StagePauses of a namespace from the cache.
func (c *Controller) pausesIn(ns string) []*v1alpha1.StagePause {
	return cachedIn[*v1alpha1.StagePause](c.informerFor(c.pauseInformers, ns), ns)
}

// pauseByKey reads a StagePause from the informer cache of its namespace.
func (c *Controller) pauseByKey(key cache.ObjectName) (*v1alpha1.StagePause, bool, error) {
	inf := c.informerFor(c.pauseInformers, key.Namespace)
	if inf == nil {
		return nil, false, nil
	}
	obj, exists, err := inf.GetIndexer().GetByKey(key.String())
	if err != nil || !exists {
		return nil, false, err
	}
	p, ok := obj.(*v1alpha1.StagePause)
	if !ok {
		return nil, false, fmt.Errorf("cache holds %T for StagePause %s", obj, key)
	}
	return p, true, nil
}

// stagesIn lists the cached Stages of a namespace: the union of this
// shard's caches, each Stage once (one moving between the two shards of an
// operator that serves both may be in both caches a moment).
func (c *Controller) stagesIn(ns string) []*kargo.Stage {
	infs := c.stageInformersFor(ns)
	if len(infs) == 1 {
		return cachedIn[*kargo.Stage](infs[0], ns)
	}
	var out []*kargo.Stage
	seen := map[string]bool{}
	for _, inf := range infs {
		for _, s := range cachedIn[*kargo.Stage](inf, ns) {
			if !seen[s.Name] {
				seen[s.Name] = true
				out = append(out, s)
			}
		}
	}
	return out
}

// stageNamespaces lists the namespaces of the cached Stages, sorted.
func (c *Controller) stageNamespaces() []string {
	var out []string
	for _, infs := range c.stageInformers {
		for _, inf := range infs {
			out = append(out, inf.GetIndexer().ListIndexFuncValues(cache.NamespaceIndex)...)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// cachedIn lists the cached objects of one namespace.
func cachedIn[T any](inf cache.SharedIndexInformer, ns string) []T {
	if inf == nil {
		return nil
	}
	objs, err := inf.GetIndexer().ByIndex(cache.NamespaceIndex, ns)
	if err != nil {
		return nil
	}
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		if v, ok := o.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// coveringPauses returns the cached pauses in force for a Stage.
func (c *Controller) coveringPauses(ns, stage string) []*v1alpha1.StagePause {
	return pausing.InForce(c.pausesIn(ns), stage)
}

// livePauses lists, from the API server, the pauses in force for a Stage,
// sorted by name: for a decision that must not rest on a cache that may lag
// behind a pause just made.
func (c *Controller) livePauses(ctx context.Context, ns, stage string) ([]*v1alpha1.StagePause, error) {
	all, err := pausing.ListLive(ctx, c.cfg.Dynamic, ns)
	if err != nil {
		return nil, err
	}
	return pausing.InForce(all, stage), nil
}

// readRecordedPauses reads live the pauses that the Stage's record names
// and that the cache lacks, before anything is judged of them. The Stage
// and StagePause watches are two streams with no order between them: the
// operator's own new pause may reach the cache after the Stage's update
// that names it, and judged from the cache alone the Stage would be
// resumed (label removed, StageResumed, a Kargo refresh) and paused again
// a moment later. Only a Stage whose record names such a pause pays for
// the read: one GET per missing name, which a real resume (the pause
// deleted) also costs.
func (c *Controller) readRecordedPauses(ctx context.Context, s *snapshot) error {
	if s.leftAlone {
		return nil
	}
	pauses, held := s.pauses, s.held
	client := c.cfg.Dynamic.Resource(v1alpha1.StagePausesResource).Namespace(s.key.Namespace)
	for _, name := range s.prior.Pauses {
		if pausing.PauseNamed(s.pauses, name) != nil || pausing.PauseNamed(s.held, name) != nil {
			continue
		}
		u, err := client.Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("reading StagePause %s, which the record names and the cache lacks: %w", name, err)
		}
		obj, _ := transformPause(u)
		p, ok := obj.(*v1alpha1.StagePause)
		switch {
		case !ok || !p.Covers(s.key.Name):
		case p.DeletionTimestamp == nil:
			pauses = append(slices.Clip(pauses), p)
		case p.HeldForResume() && pausing.OwnedBy(p, s.stage):
			held = append(slices.Clip(held), p)
		}
	}
	if len(pauses) == len(s.pauses) && len(held) == len(s.held) {
		return nil
	}
	klog.FromContext(ctx).V(2).Info("Read live the pauses the record names and the cache lacks", "pauses", len(pauses)-len(s.pauses), "held", len(held)-len(s.held))
	pausing.SortPauses(pauses)
	pausing.SortPauses(held)
	s.setPauses(pauses, held, c.cachedPromotions)
	return nil
}

// updatePause enqueues the pause's Stages only when what covers them changed:
// the operator's own status writes (stages, drained), and resyncs, would
// otherwise re-sync every Stage of a project-wide pause each time.
func (c *Controller) updatePause(oldObj, newObj any) {
	o, ok1 := oldObj.(*v1alpha1.StagePause)
	n, ok2 := newObj.(*v1alpha1.StagePause)
	if ok1 && ok2 && o.Spec == n.Spec &&
		(o.DeletionTimestamp == nil) == (n.DeletionTimestamp == nil) {
		c.enqueuePauseStatus(cache.NewObjectName(n.Namespace, n.Name))
		return
	}
	c.enqueuePause(newObj)
}

// enqueuePause enqueues the pause's own status sync and every Stage it covers.
func (c *Controller) enqueuePause(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	p, ok := obj.(*v1alpha1.StagePause)
	if !ok {
		return
	}
	c.enqueuePauseStatus(cache.NewObjectName(p.Namespace, p.Name))
	if p.Spec.Stage != v1alpha1.AllStages {
		c.enqueue(cache.NewObjectName(p.Namespace, p.Spec.Stage))
		return
	}
	for _, s := range c.stagesIn(p.Namespace) {
		c.enqueue(cache.NewObjectName(s.Namespace, s.Name))
	}
}

// enqueuePausesOf enqueues the status sync of the pauses covering a Stage
// that appeared or went away, so their Stage counts follow.
func (c *Controller) enqueuePausesOf(obj any) {
	key, err := cache.DeletionHandlingObjectToName(obj)
	if err != nil {
		return
	}
	for _, p := range c.pausesIn(key.Namespace) {
		if p.Covers(key.Name) {
			c.enqueuePauseStatus(cache.NewObjectName(p.Namespace, p.Name))
		}
	}
}
