package controller

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kargo-latch/kargo-latch/controller/promotioncache"
	"github.com/kargo-latch/kargo-latch/kargo"
)

// newPromotionCache makes the cache of the unfinished Promotions
// (controller/promotioncache), whose events enqueue their Stages and every
// Promotion of which, finished or not, is judged for a gate bypass.
func (c *Controller) newPromotionCache() *promotioncache.Cache {
	return promotioncache.New(promotioncache.Config{
		Dynamic: c.cfg.Dynamic, StageClient: c.cfg.StageClient, Resync: c.cfg.Resync,
		Handler: cache.ResourceEventHandlerFuncs{
			AddFunc:    c.enqueuePromotionStage,
			UpdateFunc: c.updatePromotion,
			DeleteFunc: c.enqueuePromotionStage,
		},
		Dropped: c.gateBypass.Observe,
		WatchOpened: func(ns, selector string) {
			c.problems.clear(selectedCacheName(kargo.PromotionsResource, ns, selector))
		},
	})
}

// watchPromotions makes the informers of the unfinished Promotions of ns,
// one per shard selector. Their cache syncs in the background (see
// watchedCache).
func (c *Controller) watchPromotions(ns string) error {
	for _, selector := range c.selectors {
		promotions, err := c.promotions.NewInformer(ns, selector)
		if err != nil {
			return err
		}
		c.informers = append(c.informers, promotions)
		if err := c.prepareSelected(kargo.PromotionsResource, ns, selector, promotions, kargo.TransformPromotion); err != nil {
			return err
		}
	}
	return nil
}

// cachedPromotions lists the Promotions the cache holds for the Stage: the
// unfinished ones, and those a drain aborted.
func (c *Controller) cachedPromotions(stage *kargo.Stage) []*kargo.Promotion {
	return c.promotions.ForStage(stage.Namespace, stage.Name)
}

// promotionPage reads one page of the Promotions of ns as the cache's lists
// do: a table of their metadata, stage and phase where the server can.
func (c *Controller) promotionPage(ctx context.Context, ns string, opts metav1.ListOptions) (*kargo.PromotionPage, error) {
	return c.promotions.Page(ctx, ns, opts)
}
