package cli

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// promotionSelector selects the pinned promotion, or the Stage's, by the
// label Kargo's webhook gives every Promotion; all of the project's when
// the Stage's name is too long for a label value.
func (w *waiter) promotionSelector() func(*metav1.ListOptions) {
	if w.target != "" {
		return byName(w.target)
	}
	if len(validation.IsValidLabelValue(w.stage)) > 0 {
		return nil
	}
	selector := labels.SelectorFromSet(labels.Set{kargo.StageLabel: w.stage}).String()
	return func(o *metav1.ListOptions) { o.LabelSelector = selector }
}

// checkPinned refuses a --promotion that names no promotion of the Stage,
// as far as the waiter can tell.
func (w *waiter) checkPinned() error {
	p := w.promotion()
	switch {
	case p != nil && p.Stage != "" && p.Stage != w.stage:
		return fmt.Errorf("promotion %s is for Stage %s, not %s", w.target, p.Stage, w.stage)
	case p != nil || w.promotions == nil:
		return nil
	}
	u := w.stageObject()
	if rec, err := latch.Decode(u.GetAnnotations()[kargo.StateAnnotation]); err == nil && rec.Promotion == w.target {
		return nil
	}
	if st := kargo.StatusFromUnstructured(u); st != nil &&
		(st.CurrentPromotion == w.target || st.LastPromotion != nil && st.LastPromotion.Name == w.target) {
		return nil
	}
	return fmt.Errorf("no such promotion %s of Stage %s in project %s", w.target, w.stage, w.ns)
}

// currentPromotion is the promotion whose cycle an unpinned wait for
// latched or verified waits for: the newest, in Kargo's name order, of the
// Stage's Promotions, its running and last promotion and its record's
// promotion, leaving out aborted ones (an aborted Promotion never ran; one
// drained while queued becomes the Stage's last promotion all the same).
// Empty when the Stage has none: the wait follows its current cycle.
func currentPromotion(stage string, u *unstructured.Unstructured, promotions []promotion) string {
	newest := ""
	consider := func(name, phase string) {
		if phase != promotionAborted && name > newest {
			newest = name
		}
	}
	if rec, err := latch.Decode(u.GetAnnotations()[kargo.StateAnnotation]); err == nil {
		consider(rec.Promotion, "")
	}
	if st := kargo.StatusFromUnstructured(u); st != nil {
		consider(st.CurrentPromotion, "")
		if lp := st.LastPromotion; lp != nil {
			consider(lp.Name, lp.Phase)
		}
	}
	for _, p := range promotions {
		if p.Stage == stage {
			consider(p.Name, p.Phase)
		}
	}
	return newest
}
