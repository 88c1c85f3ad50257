package driver

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/kargo-latch/kargo-latch/kargo"
)

// PromotionRequestsResource is Kargo's PromotionRequest (Kargo main): what a
// target-aware Stage (one with spec.targets) creates to auto-promote.
var PromotionRequestsResource = kargo.GroupVersion.WithResource("promotionrequests")

// CreatePromotionRequest creates a PromotionRequest as client, the way
// Kargo's Stage reconciler auto-promotes a target-aware Stage
// (api.NewPromotionRequest): named like a Promotion, labelled with its Stage,
// for new Freight, with no create-actor, and the Targets the Stage governs
// (none here: an empty list, which the CRD requires to be present).
func CreatePromotionRequest(ctx context.Context, client dynamic.Interface, ns, stage string) (*unstructured.Unstructured, error) {
	freight := newFreightName()
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kargo.GroupVersion.String(),
		"kind":       "PromotionRequest",
		"metadata": map[string]any{
			"name":      promotionName(stage, freight),
			"namespace": ns,
			"labels":    map[string]any{kargo.StageLabel: stage},
		},
		"spec": map[string]any{
			"stage":   stage,
			"freight": freight,
			"targets": []any{},
		},
	}}
	return client.Resource(PromotionRequestsResource).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{})
}
