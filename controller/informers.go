package controller

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/kargo-latch/kargo-latch/kargo"
)

// newSelectedInformer makes the informer of the objects of gvr in
// namespace ns (all when empty) matching a label selector (all when
// empty), listing and watching through lw, to which the API server applies
// the selector; client is the client lw uses (the reflector asks it
// whether it can stream a watch's initial list).
//
// An informer whose watch is refused still syncs from its list, then never
// sees a change. Its watch error is recorded (cachesync.go) and a watch that
// opens clears it, so the readiness tells a cache that has stopped
// following the API server from one that only had a bad moment.
func (c *Controller) newSelectedInformer(gvr schema.GroupVersionResource, ns, selector string, lw *cache.ListWatch, client any, example runtime.Object, resync time.Duration) cache.SharedIndexInformer {
	inf := buildInformer(gvr, selecting(lw, selector), client, example, resync, func() { c.problems.clear(selectedCacheName(gvr, ns, selector)) })
	c.informers = append(c.informers, inf)
	return inf
}

// buildInformer makes an informer of gvr listing and watching through lw,
// which calls watchOpened whenever a watch opens. Start runs only those
// newSelectedInformer lists; verify-on-latch's run caches run on their own
// (runinformer.go).
func buildInformer(gvr schema.GroupVersionResource, lw *cache.ListWatch, client any, example runtime.Object, resync time.Duration, watchOpened func()) cache.SharedIndexInformer {
	open := lw.WatchFuncWithContext // every ListWatch here sets it
	lw.WatchFuncWithContext = func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		w, err := open(ctx, opts)
		if err == nil {
			watchOpened()
		}
		return w, err
	}
	return cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, client), example,
		cache.SharedIndexInformerOptions{
			ResyncPeriod:      resync,
			Indexers:          cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
			ObjectDescription: gvr.String(),
		})
}

// stageInformer watches the Stages of ns that match a shard selector
// through StageClient, straight into their mirror, when there is one, else
// through the dynamic client. It never resyncs (see Config.Resync).
func (c *Controller) stageInformer(ns, selector string) cache.SharedIndexInformer {
	if c.cfg.StageClient == nil {
		return c.selectedDynamicInformer(kargo.StagesResource, ns, selector, 0)
	}
	return c.newSelectedInformer(kargo.StagesResource, ns, selector, kargo.StageListWatch(c.cfg.StageClient, ns), c.cfg.StageClient, &kargo.Stage{}, 0)
}

// dynamicInformer watches gvr in ns through the dynamic client, as
// client-go's dynamic informer does.
func (c *Controller) dynamicInformer(gvr schema.GroupVersionResource, ns string, resync time.Duration) cache.SharedIndexInformer {
	return c.selectedDynamicInformer(gvr, ns, "", resync)
}

// selectedDynamicInformer is dynamicInformer for the objects matching a
// label selector (all when empty).
func (c *Controller) selectedDynamicInformer(gvr schema.GroupVersionResource, ns, selector string, resync time.Duration) cache.SharedIndexInformer {
	return c.newSelectedInformer(gvr, ns, selector, c.dynamicListWatch(gvr, ns), c.cfg.Dynamic, &unstructured.Unstructured{}, resync)
}

// dynamicListWatch lists and watches gvr in ns through the dynamic client.
func (c *Controller) dynamicListWatch(gvr schema.GroupVersionResource, ns string) *cache.ListWatch {
	resource := c.cfg.Dynamic.Resource(gvr).Namespace(ns)
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return resource.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return resource.Watch(ctx, opts)
		},
	}
}

// selecting makes every list and watch of lw ask the API server only for
// the objects matching a label selector; lw as it is when the selector is
// empty (everything). The server filters, so an object of another shard is
// neither sent nor cached, and one that stops matching is a delete.
func selecting(lw *cache.ListWatch, selector string) *cache.ListWatch {
	if selector == "" {
		return lw
	}
	list, watchFn := lw.ListWithContextFunc, lw.WatchFuncWithContext
	return &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			opts.LabelSelector = selector
			return list(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			opts.LabelSelector = selector
			return watchFn(ctx, opts)
		},
	}
}

// servesLabels reports whether an object with these labels is this
// operator's, by its shard selectors: for an object read live, which no
// selector filtered.
func (c *Controller) servesLabels(set map[string]string) bool {
	for _, s := range c.selectors {
		if sel, err := labels.Parse(s); err == nil && sel.Matches(labels.Set(set)) {
			return true
		}
	}
	return false
}
