package controller

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/cache"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
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

// stagePromotions lists a Stage's Promotions from the API server, not the
// cache: one created a moment before the pause, not yet delivered to the
// informer, must not escape the drain. Kargo's webhook labels every
// Promotion with its Stage, so one label-filtered LIST reads them; the
// drains of a project-wide pause share one read of the project instead
// (drainlist.go). Cached ones the read missed are added.
func (c *Controller) stagePromotions(ctx context.Context, stage *kargo.Stage, pause *v1alpha1.StagePause) ([]*kargo.Promotion, error) {
	var out []*kargo.Promotion
	switch {
	case pause.Spec.Stage == v1alpha1.AllStages:
		shared, err := c.queuedAutoPromotions(ctx, pause, stage.Name)
		if err != nil {
			return nil, err
		}
		out = append(out, shared...)
	case len(validation.IsValidLabelValue(stage.Name)) == 0:
		// A name too long for a label value (over 63) cannot be Kargo's
		// label either: such a Stage's Promotions are known from the cache.
		list, err := c.cfg.Dynamic.Resource(kargo.PromotionsResource).Namespace(stage.Namespace).
			List(ctx, metav1.ListOptions{LabelSelector: kargo.StageLabel + "=" + stage.Name})
		if err != nil {
			return nil, fmt.Errorf("listing the Stage's Promotions: %w", err)
		}
		for i := range list.Items {
			if p := kargo.PromotionFromUnstructured(&list.Items[i]); p.Stage == stage.Name {
				out = append(out, p)
			}
		}
	}
	seen := map[string]bool{}
	for _, p := range out {
		seen[p.Name] = true
	}
	for _, p := range c.cachedPromotions(stage) {
		if !seen[p.Name] {
			out = append(out, p)
		}
	}
	return out, nil
}
