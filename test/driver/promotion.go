package driver

import (
	"context"
	"encoding/json"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/kargo-latch/kargo-latch/kargo"
)

// CreatePromotion creates a Promotion of new Freight to a Stage, with the
// client of whoever creates it, in the shape Kargo's webhook leaves it: the
// Kargo-style name, the stage label and annotation, and the create-actor
// annotation when actor is not empty. Kargo's own auto-promotions carry no
// actor; people's carry e.g. "kubernetes:dev".
func CreatePromotion(ctx context.Context, client dynamic.Interface, ns, stage, actor string) (*unstructured.Unstructured, error) {
	return CreateShardPromotion(ctx, client, ns, stage, "", actor)
}

// CreateShardPromotion is CreatePromotion for a Stage in a shard: Kargo's
// webhook copies the Stage's shard label onto its Promotions.
func CreateShardPromotion(ctx context.Context, client dynamic.Interface, ns, stage, shard, actor string) (*unstructured.Unstructured, error) {
	freight := newFreightName()
	annotations := map[string]any{"kargo.akuity.io/stage": stage}
	if actor != "" {
		annotations[kargo.CreateActorAnnotation] = actor
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kargo.GroupVersion.String(),
		"kind":       "Promotion",
		"metadata": map[string]any{
			"name":        promotionName(stage, freight),
			"namespace":   ns,
			"labels":      map[string]any{"kargo.akuity.io/stage": stage},
			"annotations": annotations,
		},
		"spec": map[string]any{
			"stage":   stage,
			"freight": freight,
			"steps":   []any{map[string]any{"uses": "argocd-update", "config": map[string]any{"apps": []any{map[string]any{"name": stage}}}}},
		},
	}}
	if shard != "" {
		obj.SetLabels(map[string]string{kargo.StageLabel: stage, kargo.ShardLabel: shard})
	}
	return client.Resource(kargo.PromotionsResource).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{})
}

// SetPromotionPhase writes a Promotion's status.phase, as Kargo's Promotion
// controller does (Pending when it sees it, Running when it starts it).
func (k *Kargo) SetPromotionPhase(ctx context.Context, ns, name, phase string) error {
	body, err := json.Marshal(map[string]any{"status": map[string]any{"phase": phase}})
	if err != nil {
		return err
	}
	_, err = k.client.Resource(kargo.PromotionsResource).Namespace(ns).
		Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: FieldManager}, "status")
	return err
}
