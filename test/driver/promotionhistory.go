package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kargo-latch/kargo-latch/kargo"
)

// PromotionHistory is what CreatePromotionHistory made, with the size of
// the objects as the API server stores them (managedFields included).
type PromotionHistory struct {
	Names        []string // oldest first, the order Kargo's garbage collector deletes in
	Bytes        int64
	Freight      int // Freight objects created
	FreightBytes int64
}

// CreatePromotionHistory creates n terminal Promotions of a Stage written
// by WriteBusyStatus, and the Freight they promote, as Kargo would have
// left them: every Freight of the Stage's freightHistory was promoted by
// two Promotions, the newer of which Succeeded (the older failed, errored,
// was aborted, or was a re-promotion), and the newest Promotion is the
// Stage's status.lastPromotion. Their names' ULIDs and their times lie in
// the past, before status.lastPromotion, as the Freight's verifications do.
// The Freight of freightHistory[0] exists already; the others are created,
// verified in the Stage.
func (s *Stage) CreatePromotionHistory(ctx context.Context, n int) (PromotionHistory, error) {
	var h PromotionHistory
	s.mu.Lock()
	past := s.busy
	s.mu.Unlock()
	if past == nil {
		return h, fmt.Errorf("stage %s/%s: no busy status to give a history (WriteBusyStatus first)", s.Namespace, s.Name)
	}
	created := map[string]bool{past.freight[0]: true}
	for i := range n {
		age := n - 1 - i // 0 for the newest
		k := min(age/2, len(past.freight)-1)
		freight := past.freight[k]
		plan := promotionPlan{freight: freight, phase: PhaseSucceeded, finished: past.finishedAt.Add(-time.Duration(age) * 5 * time.Hour)}
		if age%2 == 1 {
			// The older of a Freight's two Promotions.
			plan.phase = [...]string{PhaseFailed, PhaseSucceeded, PhaseErrored, PhaseAborted}[(age/2)%4]
			plan.actor = "email:release-manager@example.com"
		}
		plan.started = plan.finished.Add(-45 * time.Second)
		plan.name = promotionNameAt(s.Name, freight, plan.started)
		if age == 0 {
			plan.name = past.lastPromotion
		}
		if !created[freight] {
			// Verified in the Stage after the newer, successful, of its
			// Promotions.
			verifiedAt := past.finishedAt.Add(-time.Duration(2*k)*5*time.Hour + 10*time.Minute)
			size, err := s.createPastFreight(ctx, freight, verifiedAt)
			if err != nil {
				return h, err
			}
			created[freight] = true
			h.Freight++
			h.FreightBytes += size
		}
		if err := s.createPromotion(ctx, plan); err != nil {
			return h, err
		}
		stored, err := s.patchPromotionStatus(ctx, plan.name, s.terminalPromotionStatus(plan))
		if err != nil {
			return h, err
		}
		h.Names = append(h.Names, plan.name)
		h.Bytes += stored
	}
	s.mu.Lock()
	past.promoted = len(created)
	s.mu.Unlock()
	return h, nil
}

// PastFreight lists the Freight of the Stage's freightHistory that exists,
// newest first: the Freight WriteBusyStatus made and the Freight that
// CreatePromotionHistory made for its Promotions. Nil for a Stage that is
// not busy.
func (s *Stage) PastFreight() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy == nil {
		return nil
	}
	return append([]string(nil), s.busy.freight[:max(1, s.busy.promoted)]...)
}

// createPastFreight creates a Freight of the Stage's past, as its Warehouse
// made it, verified in the Stage at verifiedAt, and returns its size as
// stored.
func (s *Stage) createPastFreight(ctx context.Context, freight string, verifiedAt time.Time) (int64, error) {
	client := s.k.client.Resource(kargo.FreightsResource).Namespace(s.Namespace)
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kargo.GroupVersion.String(),
		"kind":       "Freight",
		"metadata":   map[string]any{"name": freight, "namespace": s.Namespace},
		"alias":      "freight-" + freight[:7],
		"origin":     map[string]any{"kind": "Warehouse", "name": s.Warehouse},
		"images":     freightImages(freight),
	}}
	if _, err := client.Create(ctx, obj, metav1.CreateOptions{FieldManager: FieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
		return 0, fmt.Errorf("creating Freight %s: %w", freight, err)
	}
	body, err := json.Marshal(map[string]any{"status": map[string]any{
		"verifiedIn": map[string]any{s.Name: map[string]any{"verifiedAt": rfc3339(verifiedAt)}},
	}})
	if err != nil {
		return 0, err
	}
	u, err := client.Patch(ctx, freight, types.MergePatchType, body, metav1.PatchOptions{FieldManager: FieldManager}, "status")
	if err != nil {
		return 0, fmt.Errorf("patching status of Freight %s/%s: %w", s.Namespace, freight, err)
	}
	return jsonSize(u), nil
}

// promotionNameAt is a Promotion name as Kargo's webhook gives it, whose
// ULID was made at a given time: <stage>.<ulid>.<first 7 of freight>.
// promotionName makes them now, increasing; these lie in the past.
func promotionNameAt(stage, freight string, at time.Time) string {
	return fmt.Sprintf("%s.%s.%s", stage, ulidAt(at), freight[:7])
}
