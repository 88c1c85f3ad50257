package driver

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kargo-latch/kargo-latch/kargo"
)

// Kargo's own auto-promotion holds (v1.11+; kargo-api-facts.md §6, §11.5),
// played as Kargo plays them:
//   - Kargo's Promotion webhook stamps an intent on a person's Promotion
//     when it is created (auto-promotion enabled): the hold of the origin
//     (kargo.akuity.io/auto-promotion-hold=<origin key>) when the Freight is
//     not the origin's auto-promotion candidate (a rollback), its resume
//     (kargo.akuity.io/auto-promotion-resume) when it is.
//   - In each pass over the Stage, right before auto-promoting, Kargo's
//     Stage controller recomputes status.effectiveAutoPromotionHolds: the
//     durable status.autoPromotionHolds, overlaid per origin with the
//     newest non-aborted intent Promotion newer than lastPromotion. So the
//     effective hold appears (or goes) in the first pass after the
//     Promotion was created, while it is still Pending or Running
//     (TakeInPromotion).
//   - When the Promotion is terminal, syncPromotions replays it: the patch
//     that records it as lastPromotion also sets the durable entry (hold)
//     or deletes it (resume); an Aborted one changes nothing durable, and
//     the recompute later in the pass drops its overlay (FinishPromotion).
//
// A hold's entry is the Promotion's: freightName, origin, promotionName,
// actor (its create-actor) and createdAt (its creationTimestamp). Both maps
// are written only by Kargo's Stage controller, with JSON merge patches of
// the status subresource holding the diff: a key set to null deletes an
// entry, and a map left empty is patched to null as a whole.

// personPromotions names the Promotions CreatePersonPromotion made, whose
// intent FinishPromotion replays.
var personPromotions sync.Map

// CreatePersonPromotion creates a person's Promotion to the Stage, as
// "kargo promote" and Kargo's webhook leave it: of freight, Freight other
// than the Warehouse's candidate (a rollback: the hold intent), or, when
// freight is empty, of new Freight, the candidate (the resume intent, which
// releases a hold). actor is its create-actor, e.g. "kubernetes:dev".
// Its steps are the Stage's promotion template, as Kargo copies them.
// Kargo's Stage controller has not taken it in yet (TakeInPromotion). It
// returns the Promotion's name.
func (s *Stage) CreatePersonPromotion(ctx context.Context, freight, actor string) (string, error) {
	intent := kargo.HoldIntentAnnotation
	if freight == "" {
		freight, intent = newFreightName(), kargo.ResumeIntentAnnotation
	}
	name := promotionName(s.Name, freight)
	labels := map[string]any{kargo.StageLabel: s.Name}
	if s.Shard != "" {
		labels[kargo.ShardLabel] = s.Shard
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kargo.GroupVersion.String(),
		"kind":       "Promotion",
		"metadata": map[string]any{
			"name":      name,
			"namespace": s.Namespace,
			"labels":    labels,
			"annotations": map[string]any{
				kargo.StageLabel: s.Name, kargo.CreateActorAnnotation: actor, intent: s.holdKey(),
			},
			"ownerReferences": []any{map[string]any{"apiVersion": kargo.GroupVersion.String(), "kind": "Stage",
				"name": s.Name, "uid": string(s.UID), "controller": true, "blockOwnerDeletion": true}},
		},
		"spec": map[string]any{
			"stage":   s.Name,
			"freight": freight,
			"steps":   s.promotionTemplate(),
		},
	}}
	if _, err := s.k.client.Resource(kargo.PromotionsResource).Namespace(s.Namespace).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	personPromotions.Store(name, true)
	return name, nil
}

// TakeInPromotion is Kargo's pass over the Stage after a person's
// Promotion was created: its Stage controller makes it the current
// promotion (health Unknown while it runs) and overlays its intent on the
// effective holds; then its Promotion controller runs it.
func (s *Stage) TakeInPromotion(ctx context.Context, name string) error {
	p, err := s.promotion(ctx, name)
	if err != nil {
		return err
	}
	freight, _, _ := unstructured.NestedString(p.Object, "spec", "freight")
	s.mu.Lock()
	s.running = name
	s.mu.Unlock()
	if err := s.patchStatus(ctx, map[string]any{
		"currentPromotion": map[string]any{"name": name, "freight": s.freightRef(freight)},
		"health":           map[string]any{"status": kargo.HealthUnknown, "issues": []any{IssuePromotionInProgress}},
	}); err != nil {
		return err
	}
	var entry map[string]any // the resume intent: no hold
	if p.GetAnnotations()[kargo.HoldIntentAnnotation] == s.holdKey() {
		entry = holdEntry(p, s.Warehouse)
	}
	if err := s.setHold(ctx, "effectiveAutoPromotionHolds", entry); err != nil {
		return err
	}
	return s.k.SetPromotionPhase(ctx, s.Namespace, name, PhaseRunning)
}

// StartPromotionOf is a person rolling back: a Promotion of freight, which
// the Stage had before, that Kargo takes in. It returns its name.
func (s *Stage) StartPromotionOf(ctx context.Context, freight, actor string) (string, error) {
	if freight == "" {
		return "", fmt.Errorf("stage %s/%s: a rollback needs the Freight to roll back to", s.Namespace, s.Name)
	}
	return s.startPersonPromotion(ctx, freight, actor)
}

// StartCandidatePromotion is a person promoting the Warehouse's candidate
// (new Freight), which releases Kargo's hold: a Promotion that Kargo takes
// in. It returns its name.
func (s *Stage) StartCandidatePromotion(ctx context.Context, actor string) (string, error) {
	return s.startPersonPromotion(ctx, "", actor)
}

func (s *Stage) startPersonPromotion(ctx context.Context, freight, actor string) (string, error) {
	name, err := s.CreatePersonPromotion(ctx, freight, actor)
	if err != nil {
		return "", err
	}
	return name, s.TakeInPromotion(ctx, name)
}

// replayIntent is FinishPromotion's part for a person's Promotion: Kargo's
// Promotion controller records its terminal phase first; then the Stage
// controller's patch that makes it lastPromotion (status) also applies its
// intent to the durable holds, unless it was Aborted. It returns the rest
// of that pass: the effective holds recomputed, which differ only after an
// Aborted one (its overlay goes; the durable entry, if any, shows again).
// Nothing for other Promotions.
func (s *Stage) replayIntent(ctx context.Context, name, phase string, status map[string]any) (func(context.Context) error, error) {
	if _, ok := personPromotions.LoadAndDelete(name); !ok {
		return nil, nil
	}
	if err := s.k.SetPromotionPhase(ctx, s.Namespace, name, phase); err != nil {
		return nil, err
	}
	p, err := s.promotion(ctx, name)
	if err != nil {
		return nil, err
	}
	u, err := s.get(ctx)
	if err != nil {
		return nil, err
	}
	durable, _, _ := unstructured.NestedMap(u.Object, "status", "autoPromotionHolds")
	if phase == PhaseAborted {
		entry, _ := durable[s.holdKey()].(map[string]any)
		return func(ctx context.Context) error { return s.setHold(ctx, "effectiveAutoPromotionHolds", entry) }, nil
	}
	var entry map[string]any
	switch s.holdKey() {
	case p.GetAnnotations()[kargo.HoldIntentAnnotation]:
		entry = holdEntry(p, s.Warehouse)
	case p.GetAnnotations()[kargo.ResumeIntentAnnotation]:
		if _, held := durable[s.holdKey()]; !held {
			return nil, nil
		}
	default:
		return nil, nil
	}
	status["autoPromotionHolds"] = holdPatch(durable, s.holdKey(), entry)
	return nil, nil
}

// setHold sets the Stage's Warehouse's entry of the holds map field (nil:
// removes it), with a patch of that field alone, when it changes.
func (s *Stage) setHold(ctx context.Context, field string, entry map[string]any) error {
	u, err := s.get(ctx)
	if err != nil {
		return err
	}
	holds, _, _ := unstructured.NestedMap(u.Object, "status", field)
	if current, held := holds[s.holdKey()]; held && reflect.DeepEqual(current, entry) || !held && entry == nil {
		return nil // no diff, no patch
	}
	return s.patchStatus(ctx, map[string]any{field: holdPatch(holds, s.holdKey(), entry)})
}

// holdPatch is Kargo's diff of a holds map whose entry key becomes entry
// (nil: deleted): the key alone, or null for the whole map it empties.
func holdPatch(holds map[string]any, key string, entry map[string]any) any {
	if entry != nil {
		return map[string]any{key: entry}
	}
	if _, held := holds[key]; held && len(holds) == 1 {
		return nil
	}
	return map[string]any{key: nil}
}

// holdEntry is the hold Kargo records from a hold-intent Promotion.
func holdEntry(p *unstructured.Unstructured, warehouse string) map[string]any {
	freight, _, _ := unstructured.NestedString(p.Object, "spec", "freight")
	entry := map[string]any{
		"freightName":   freight,
		"origin":        map[string]any{"kind": "Warehouse", "name": warehouse},
		"promotionName": p.GetName(),
		"createdAt":     p.GetCreationTimestamp().UTC().Format(time.RFC3339),
	}
	if actor := p.GetAnnotations()[kargo.CreateActorAnnotation]; actor != "" {
		entry["actor"] = actor
	}
	return entry
}

func (s *Stage) promotion(ctx context.Context, name string) (*unstructured.Unstructured, error) {
	return s.k.client.Resource(kargo.PromotionsResource).Namespace(s.Namespace).Get(ctx, name, metav1.GetOptions{})
}

// holdKey is the origin key Kargo keeps the Stage's Warehouse's hold under.
func (s *Stage) holdKey() string { return "Warehouse/" + s.Warehouse }
