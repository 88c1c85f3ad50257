package driver

import (
	"context"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kargo-latch/kargo-latch/kargo"
)

// WithUpstream makes the Stage request the Warehouse's Freight from the
// upstream Stages named instead of directly, as a downstream Stage does.
func WithUpstream(stages ...string) StageOption {
	return func(stage *unstructured.Unstructured) {
		upstream := make([]any, len(stages))
		for i, s := range stages {
			upstream[i] = s
		}
		stage.Object["spec"].(map[string]any)["requestedFreight"] = []any{map[string]any{
			"origin":  map[string]any{"kind": "Warehouse", "name": "warehouse"},
			"sources": map[string]any{"stages": upstream},
		}}
	}
}

// AvailableTo plays Kargo's availability rule, as the facts document gives
// it from Kargo's source (pkg/api/stage.go; §7.7), for one Freight and
// Stage: the Freight is offered to
// the Stage when it is approved for it, or comes from a Warehouse the Stage
// requests directly, or is verified in the upstream Stages it is requested
// from: in one of them, or in all with availabilityStrategy All. Soak time
// is left out: the Stages this driver makes ask for none. why says which.
func (k *Kargo) AvailableTo(ctx context.Context, ns, stage, freight string) (available bool, why string, err error) {
	s, err := k.client.Resource(kargo.StagesResource).Namespace(ns).Get(ctx, stage, metav1.GetOptions{})
	if err != nil {
		return false, "", err
	}
	f, err := k.Freight(ctx, ns, freight)
	if err != nil {
		return false, "", err
	}
	if _, approved, _ := unstructured.NestedMap(f.Object, "status", "approvedFor", stage); approved {
		return true, "approved for " + stage, nil
	}
	origin, _, _ := unstructured.NestedString(f.Object, "origin", "name")
	verifiedIn, _, _ := unstructured.NestedMap(f.Object, "status", "verifiedIn")
	requests, _, _ := unstructured.NestedSlice(s.Object, "spec", "requestedFreight")
	for _, r := range requests {
		request, _ := r.(map[string]any)
		if name, _, _ := unstructured.NestedString(request, "origin", "name"); name != origin {
			continue
		}
		if direct, _, _ := unstructured.NestedBool(request, "sources", "direct"); direct {
			return true, "requested directly from Warehouse " + origin, nil
		}
		upstream, _, _ := unstructured.NestedStringSlice(request, "sources", "stages")
		strategy, _, _ := unstructured.NestedString(request, "sources", "availabilityStrategy")
		var verified, missing []string
		for _, up := range upstream {
			if _, ok := verifiedIn[up]; ok {
				verified = append(verified, up)
			} else {
				missing = append(missing, up)
			}
		}
		switch {
		case strategy == "All" && len(missing) == 0 && len(verified) > 0,
			strategy != "All" && len(verified) > 0:
			return true, "verified in " + strings.Join(verified, ", "), nil
		case len(missing) > 0:
			return false, "not verified in " + strings.Join(missing, ", "), nil
		}
	}
	return false, "not requested by " + stage, nil
}
