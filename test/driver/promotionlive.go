package driver

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kargo-latch/kargo-latch/kargo"
)

// LivePromotion is a Promotion the driver plays through Kargo's lifecycle.
type LivePromotion struct {
	s    *Stage
	plan promotionPlan
}

// Name is the Promotion's name.
func (p *LivePromotion) Name() string { return p.plan.name }

// QueuePromotion creates a Promotion of freight (which must exist) to the
// Stage as Kargo's controller auto-promotes it (no create-actor), shaped as
// Kargo's webhook leaves it, and marks it Pending, as Kargo's Promotion
// controller does when it first sees it. Only the Promotion is written:
// status.currentPromotion of the Stage is not.
func (s *Stage) QueuePromotion(ctx context.Context, freight string) (*LivePromotion, error) {
	p := &LivePromotion{s: s, plan: promotionPlan{name: promotionName(s.Name, freight), freight: freight, phase: PhasePending}}
	if err := s.createPromotion(ctx, p.plan); err != nil {
		return nil, err
	}
	return p, p.patch(ctx, map[string]any{"phase": PhasePending})
}

// Run marks the Promotion Running as Kargo's Promotion controller leaves it
// between passes: every step done up to argocd-update, which waits for Argo
// CD's sync.
func (p *LivePromotion) Run(ctx context.Context) error {
	p.plan.phase, p.plan.started = PhaseRunning, p.s.k.clock().UTC()
	return p.patch(ctx, p.s.runningPromotionStatus(p.plan))
}

// Finish writes the Promotion's terminal status in phase, as Kargo's
// Promotion controller does when its last step ends.
func (p *LivePromotion) Finish(ctx context.Context, phase string) error {
	p.plan.phase, p.plan.finished = phase, p.s.k.clock().UTC()
	if p.plan.started.IsZero() {
		p.plan.started = p.plan.finished
	}
	return p.patch(ctx, p.s.terminalPromotionStatus(p.plan))
}

func (p *LivePromotion) patch(ctx context.Context, status map[string]any) error {
	_, err := p.s.patchPromotionStatus(ctx, p.plan.name, status)
	return err
}

// DeletePromotion deletes one of the Stage's Promotions, as Kargo's garbage
// collector deletes the oldest terminal ones beyond MAX_RETAINED_PROMOTIONS.
func (s *Stage) DeletePromotion(ctx context.Context, name string) error {
	err := s.k.client.Resource(kargo.PromotionsResource).Namespace(s.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
