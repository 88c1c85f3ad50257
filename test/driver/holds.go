package driver

import (
	"context"
	"time"

	"github.com/kargo-latch/kargo-latch/kargo"
)

// Kargo's own auto-promotion holds (v1.11+; kargo-api-facts.md §6, §11.5).
// A person who promotes other Freight than an origin's auto-promotion
// candidate (a rollback) gets the hold intent stamped on the Promotion by
// Kargo's webhook; Kargo's Stage controller, replaying the Promotion once
// terminal, records the hold in status.autoPromotionHolds under the origin's
// key, and mirrors it in status.effectiveAutoPromotionHolds (the map Kargo
// honours, recomputed at the end of each reconcile). A Promotion of the
// candidate releases it. Both maps are written only by Kargo's Stage
// controller, with JSON merge patches of the status subresource holding the
// diff: a key set to null deletes an entry, and a map left empty is patched
// to null as a whole.

// Hold is what Kargo records of the Promotion that made a hold.
type Hold struct {
	Freight   string // the Freight the person promoted
	Promotion string
	Actor     string // e.g. "admin", "kubernetes:dev"
	CreatedAt time.Time
}

// StartPromotionOf is StartPromotion of Freight the Stage had before: a
// person rolling back. It returns the Promotion's name.
func (s *Stage) StartPromotionOf(ctx context.Context, freight string) (string, error) {
	s.mu.Lock()
	name := promotionName(s.Name, freight)
	s.running = name
	s.mu.Unlock()
	return name, s.patchStatus(ctx, map[string]any{
		"currentPromotion": map[string]any{"name": name, "freight": s.freightRef(freight)},
		"health":           map[string]any{"status": kargo.HealthUnknown, "issues": []any{IssuePromotionInProgress}},
	})
}

// HoldAutoPromotion records a hold on the Stage's Warehouse as Kargo's
// Stage controller does when it replays the person's Promotion: the durable
// entry first (the patch of syncPromotions), then its mirror in the
// effective holds (the patch at the end of the same reconcile).
func (s *Stage) HoldAutoPromotion(ctx context.Context, h Hold) error {
	entry := map[string]any{
		"freightName":   h.Freight,
		"origin":        map[string]any{"kind": "Warehouse", "name": s.Warehouse},
		"promotionName": h.Promotion,
		"actor":         h.Actor,
		"createdAt":     h.CreatedAt.UTC().Format(time.RFC3339),
	}
	key := s.holdKey()
	if err := s.patchStatus(ctx, map[string]any{"autoPromotionHolds": map[string]any{key: entry}}); err != nil {
		return err
	}
	return s.patchStatus(ctx, map[string]any{"effectiveAutoPromotionHolds": map[string]any{key: entry}})
}

// ReleaseAutoPromotionHold removes the hold on the Stage's Warehouse as
// Kargo's Stage controller does when it replays a person's Promotion of the
// candidate Freight (which carries the resume intent): the durable entry
// first, then the effective one. Kargo's diff patches an emptied map to
// null, an entry among others to null by key.
func (s *Stage) ReleaseAutoPromotionHold(ctx context.Context) error {
	u, err := s.get(ctx)
	if err != nil {
		return err
	}
	status, _ := u.Object["status"].(map[string]any)
	for _, field := range []string{"autoPromotionHolds", "effectiveAutoPromotionHolds"} {
		holds, _ := status[field].(map[string]any)
		var patch any = map[string]any{s.holdKey(): nil}
		if _, held := holds[s.holdKey()]; held && len(holds) == 1 {
			patch = nil
		}
		if err := s.patchStatus(ctx, map[string]any{field: patch}); err != nil {
			return err
		}
	}
	return nil
}

// holdKey is the origin key Kargo keeps the Stage's Warehouse's hold under.
func (s *Stage) holdKey() string { return "Warehouse/" + s.Warehouse }
