package controller

import (
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
