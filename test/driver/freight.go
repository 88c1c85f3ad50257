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

// ensureFreight creates the Freight object a Warehouse would have made for
// freight, through Kargo's real Freight CRD: no spec, a top-level origin,
// and status.currentlyIn naming the Stage once it is promoted there.
func (s *Stage) ensureFreight(ctx context.Context, freight string) error {
	client := s.k.client.Resource(kargo.FreightsResource).Namespace(s.Namespace)
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kargo.GroupVersion.String(),
		"kind":       "Freight",
		"metadata":   map[string]any{"name": freight, "namespace": s.Namespace},
		"alias":      "freight-" + freight[:7],
		"origin":     map[string]any{"kind": "Warehouse", "name": s.Warehouse},
		"images":     []any{map[string]any{"repoURL": "ghcr.io/example/app", "tag": "v" + freight[:7], "digest": "sha256:" + freight + freight[:24]}},
	}}
	_, err := client.Create(ctx, obj, metav1.CreateOptions{FieldManager: FieldManager})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating Freight %s: %w", freight, err)
	}
	return s.k.patchFreightStatus(ctx, s.Namespace, freight, map[string]any{
		"currentlyIn": map[string]any{s.Name: map[string]any{"since": s.k.clock().UTC().Format(time.RFC3339)}},
	})
}

// MarkVerified writes status.verifiedIn.<stage> on a Freight as Kargo's
// Stage controller does when a pass sees the Stage Healthy and verified:
// verifiedAt is the verification's finish time.
func (s *Stage) MarkVerified(ctx context.Context, freight string, at time.Time) error {
	return s.k.patchFreightStatus(ctx, s.Namespace, freight, map[string]any{
		"verifiedIn": map[string]any{s.Name: map[string]any{"verifiedAt": at.UTC().Format(time.RFC3339)}},
	})
}

// Freight reads a Freight as it is on the server.
func (k *Kargo) Freight(ctx context.Context, ns, name string) (*unstructured.Unstructured, error) {
	return k.client.Resource(kargo.FreightsResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
}

// CurrentFreight is the name of the Freight in the Stage's freightHistory[0].
func (s *Stage) CurrentFreight(ctx context.Context) (string, error) {
	u, err := s.get(ctx)
	if err != nil {
		return "", err
	}
	history, _, _ := unstructured.NestedSlice(u.Object, "status", "freightHistory")
	if len(history) == 0 {
		return "", fmt.Errorf("stage %s/%s has no Freight", s.Namespace, s.Name)
	}
	items, _, _ := unstructured.NestedMap(history[0].(map[string]any), "items")
	for _, item := range items {
		if name, _, _ := unstructured.NestedString(item.(map[string]any), "name"); name != "" {
			return name, nil
		}
	}
	return "", fmt.Errorf("stage %s/%s: freightHistory[0] has no items", s.Namespace, s.Name)
}

// patchFreightStatus sends a JSON merge patch of a Freight's status
// subresource, as Kargo does.
func (k *Kargo) patchFreightStatus(ctx context.Context, ns, name string, status map[string]any) error {
	body, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	_, err = k.client.Resource(kargo.FreightsResource).Namespace(ns).
		Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: FieldManager}, "status")
	if err != nil {
		return fmt.Errorf("patching status of Freight %s/%s: %w", ns, name, err)
	}
	return nil
}
