package controller

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	"github.com/kargo-latch/kargo-latch/controller/verification"
	"github.com/kargo-latch/kargo-latch/latch"
)

// verify-on-latch's caches of kargo-latch's own AnalysisRuns (selected by
// its marker, slimmed, indexed by Stage). Unlike the core's caches they
// are optional: they never hold back the start or the readiness, and a
// cache that cannot list (Argo Rollouts' CRDs missing, no rights) turns
// verify-on-latch off where it serves, never the latch, the pauses or the
// operator (verifyavailability.go). Each runs on its own, under Start's
// context: those of the served namespaces from the start, and, while the
// all-namespaces one may not list (its rights bound per project), one per
// project whose Stages opt in.

// runCaches holds the AnalysisRun caches; nil without verify-on-latch.
type runCaches struct {
	mu sync.Mutex
	// ctx is Start's; nil until Start. The caches run under it.
	ctx context.Context
	// served has one cache per namespace the operator serves; the key ""
	// holds the all-namespaces one.
	served map[string]*runCache
	// projects has one cache per project whose Stages opt in, while the
	// all-namespaces cache is refused.
	projects map[string]*runCache
	// problems are the caches' diagnosed list and watch failures, apart
	// from the core's: they are no reason to be unready.
	problems cacheProblems
	// state is, per project with a Stage that opts in, its availability
	// as last reported: "" when available, else why not.
	state map[string]string
}

// runCache is one AnalysisRun informer.
type runCache struct {
	name string
	inf  cache.SharedIndexInformer
	// refused: the API server answered its last list or watch with 403.
	refused atomic.Bool
	// stop ends it; nil until it runs.
	stop context.CancelFunc
}

func newRunCaches() *runCaches {
	return &runCaches{served: map[string]*runCache{}, projects: map[string]*runCache{}, state: map[string]string{}}
}

// watchRuns makes the AnalysisRun cache of the served namespace ns
// (verify-on-latch); Start runs it.
func (c *Controller) watchRuns(ns string) error {
	rc, err := c.newRunCache(ns)
	if err != nil {
		return err
	}
	c.runs.served[ns] = rc
	return nil
}

// newRunCache makes the informer of kargo-latch's own AnalysisRuns in ns:
// a run's change syncs the Stage it verifies.
func (c *Controller) newRunCache(ns string) (*runCache, error) {
	gvr, selector := verification.AnalysisRunsResource, verification.OwnRunsSelector
	rc := &runCache{name: selectedCacheName(gvr, ns, selector)}
	rc.inf = buildInformer(gvr, selecting(c.dynamicListWatch(gvr, ns), selector), c.cfg.Dynamic, &unstructured.Unstructured{}, 0, func() {
		rc.refused.Store(false)
		c.runs.problems.clear(rc.name)
	})
	if err := rc.inf.AddIndexers(cache.Indexers{verification.StageIndex: verification.IndexByStage}); err != nil {
		return nil, fmt.Errorf("adding the AnalysisRun index: %w", err)
	}
	if err := rc.inf.SetTransform(verification.TransformRun); err != nil {
		return nil, fmt.Errorf("setting an informer transform: %w", err)
	}
	diagnose := c.diagnosingHandler(&c.runs.problems, gvr, ns, rc.name, true)
	if err := rc.inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		// Sticky until a list succeeds: an outage (connection refused, a
		// timeout) says nothing about rights, and must not tear down the
		// per-project caches a refusal brought.
		if apierrors.IsForbidden(err) {
			rc.refused.Store(true)
		}
		diagnose(ctx, r, err)
	}); err != nil {
		return nil, fmt.Errorf("setting an informer's watch error handler: %w", err)
	}
	// A run that has just failed fails its cycle: its Stage owes a pause,
	// and goes before the others (handlers.go).
	enqueue := func(oldObj, obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		u, ok := obj.(*unstructured.Unstructured)
		if !ok || verification.StageOf(u) == "" {
			return
		}
		key := cache.NewObjectName(u.GetNamespace(), verification.StageOf(u))
		if o, ok := oldObj.(*unstructured.Unstructured); ok && runFailedNow(o, u) {
			c.enqueueUrgent(key)
			return
		}
		c.enqueue(key)
	}
	if _, err := rc.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { enqueue(nil, obj) }, UpdateFunc: enqueue, DeleteFunc: func(obj any) { enqueue(nil, obj) },
	}); err != nil {
		return nil, fmt.Errorf("adding an event handler: %w", err)
	}
	return rc, nil
}

// run starts the cache under ctx.
func (rc *runCache) run(ctx context.Context) {
	ctx, rc.stop = context.WithCancel(ctx)
	go rc.inf.RunWithContext(ctx)
}

// usable reports whether the cache has synced and follows the API server:
// no list or watch of it is refused now.
func (r *runCaches) usable(rc *runCache) bool {
	return rc != nil && rc.inf.HasSynced() && r.problems.knownOf(rc.name) == ""
}

// startRunCaches runs the served AnalysisRun caches, and looks after them
// until ctx is done. Nothing waits for them.
func (c *Controller) startRunCaches(ctx context.Context) {
	if c.runs == nil {
		return
	}
	c.runs.mu.Lock()
	c.runs.ctx = ctx
	for _, rc := range c.runs.served {
		rc.run(ctx)
	}
	c.runs.mu.Unlock()
	go c.keepRunCaches(ctx)
}

// runCacheFor is the cache that holds the runs of namespace ns, if one is
// usable: the served namespace's, the all-namespaces one, or the project's.
func (c *Controller) runCacheFor(ns string) *runCache {
	if c.runs == nil {
		return nil
	}
	c.runs.mu.Lock()
	defer c.runs.mu.Unlock()
	for _, rc := range []*runCache{c.runs.served[ns], c.runs.served[metav1.NamespaceAll], c.runs.projects[ns]} {
		if c.runs.usable(rc) {
			return rc
		}
	}
	return nil
}

// watchesRunsIn reports whether the runs of namespace ns are cached: only
// then does a sync observe them.
func (c *Controller) watchesRunsIn(ns string) bool {
	return c.runCacheFor(ns) != nil
}

// cachedRuns are the cached runs kargo-latch made for a Stage.
func (c *Controller) cachedRuns(ns, stage string) []latch.Run {
	rc := c.runCacheFor(ns)
	if rc == nil {
		return nil
	}
	objs, _ := rc.inf.GetIndexer().ByIndex(verification.StageIndex, verification.StageKey(ns, stage))
	var runs []latch.Run
	for _, obj := range objs {
		if u, ok := obj.(*unstructured.Unstructured); ok && verification.StageOf(u) == stage {
			runs = append(runs, verification.RunFrom(u))
		}
	}
	return runs
}

// runFailedNow reports whether an AnalysisRun kargo-latch started has just
// ended in a phase that fails its cycle: its Stage goes in the urgent lane.
func runFailedNow(o, n *unstructured.Unstructured) bool {
	was, is := verification.RunFrom(o).Phase, verification.RunFrom(n).Phase
	return is != was && is.FailsRun()
}
