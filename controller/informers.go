package controller

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/kargo-latch/kargo-latch/kargo"
)

// newInformer makes the informer of gvr in namespace ns (all when empty),
// listing and watching through lw; client is the client lw uses (the
// reflector asks it whether it can stream a watch's initial list).
//
// An informer whose watch is refused still syncs from its list, then never
// sees a change. Its watch error is recorded (cachesync.go) and a watch that
// opens clears it, so the readiness tells a cache that has stopped
// following the API server from one that only had a bad moment.
func (c *Controller) newInformer(gvr schema.GroupVersionResource, ns string, lw *cache.ListWatch, client any, example runtime.Object, resync time.Duration) cache.SharedIndexInformer {
	name := cacheName(gvr, ns)
	open := lw.WatchFuncWithContext // every ListWatch here sets it
	lw.WatchFuncWithContext = func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
		w, err := open(ctx, opts)
		if err == nil {
			c.problems.clear(name)
		}
		return w, err
	}
	inf := cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, client), example,
		cache.SharedIndexInformerOptions{
			ResyncPeriod:      resync,
			Indexers:          cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc},
			ObjectDescription: gvr.String(),
		})
	c.informers = append(c.informers, inf)
	return inf
}

// stageInformer watches the Stages of ns through StageClient, straight into
// their mirror, when there is one, else through the dynamic client. It never
// resyncs (see Config.Resync).
func (c *Controller) stageInformer(ns string) cache.SharedIndexInformer {
	if c.cfg.StageClient == nil {
		return c.dynamicInformer(kargo.StagesResource, ns, 0)
	}
	return c.newInformer(kargo.StagesResource, ns, kargo.StageListWatch(c.cfg.StageClient, ns), c.cfg.StageClient, &kargo.Stage{}, 0)
}

// dynamicInformer watches gvr in ns through the dynamic client, as
// client-go's dynamic informer does.
func (c *Controller) dynamicInformer(gvr schema.GroupVersionResource, ns string, resync time.Duration) cache.SharedIndexInformer {
	resource := c.cfg.Dynamic.Resource(gvr).Namespace(ns)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			return resource.List(ctx, opts)
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			return resource.Watch(ctx, opts)
		},
	}
	return c.newInformer(gvr, ns, lw, c.cfg.Dynamic, &unstructured.Unstructured{}, resync)
}
