package controller

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
)

// cachedPromotions lists the Promotions the caches hold for the Stage: the
// unfinished ones, and those a drain aborted (promotionwatch.go).
func (c *Controller) cachedPromotions(stage *kargo.Stage) []*kargo.Promotion {
	var out []*kargo.Promotion
	for _, inf := range c.promotionInformersFor(stage.Namespace) {
		cached, err := inf.GetIndexer().ByIndex(promotionsByStage, stage.Namespace+"/"+stage.Name)
		if err != nil {
			continue // the index exists from the start: no error to tell
		}
		for _, o := range cached {
			if p, ok := o.(*kargo.Promotion); ok {
				out = append(out, p)
			}
		}
	}
	return out
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
