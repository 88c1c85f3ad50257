package pausing

import (
	"context"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
)

// PauseNamed finds a pause by name; nil when none has it.
func PauseNamed(pauses []*v1alpha1.StagePause, name string) *v1alpha1.StagePause {
	for _, p := range pauses {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// PauseWithUID finds a pause by UID; nil when none has it (or uid is empty).
func PauseWithUID(pauses []*v1alpha1.StagePause, uid types.UID) *v1alpha1.StagePause {
	for _, p := range pauses {
		if uid != "" && p.UID == uid {
			return p
		}
	}
	return nil
}

// SortPauses sorts pauses by name, as every list of them is kept.
func SortPauses(p []*v1alpha1.StagePause) {
	slices.SortFunc(p, func(a, b *v1alpha1.StagePause) int { return strings.Compare(a.Name, b.Name) })
}

// InForce keeps the pauses that cover a Stage, sorted by name. A pause being
// deleted no longer counts: deleting is resuming.
func InForce(pauses []*v1alpha1.StagePause, stage string) []*v1alpha1.StagePause {
	var out []*v1alpha1.StagePause
	for _, p := range pauses {
		if p.DeletionTimestamp == nil && p.Covers(stage) {
			out = append(out, p)
		}
	}
	SortPauses(out)
	return out
}

// FromObject turns an unstructured StagePause into a typed one. An object
// that does not convert keeps only its identity, and so covers nothing.
func FromObject(obj map[string]any) *v1alpha1.StagePause {
	p := &v1alpha1.StagePause{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj, p); err != nil {
		u := unstructured.Unstructured{Object: obj}
		p = &v1alpha1.StagePause{}
		p.Name, p.Namespace, p.UID = u.GetName(), u.GetNamespace(), u.GetUID()
	}
	p.ManagedFields = nil
	return p
}

// ListLive lists the StagePauses of ns from the API server, for a decision
// that must not rest on a cache that may lag behind a pause just made.
func ListLive(ctx context.Context, dyn dynamic.Interface, ns string) ([]*v1alpha1.StagePause, error) {
	list, err := dyn.Resource(v1alpha1.StagePausesResource).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing StagePauses: %w", err)
	}
	pauses := make([]*v1alpha1.StagePause, 0, len(list.Items))
	for i := range list.Items {
		pauses = append(pauses, FromObject(list.Items[i].Object))
	}
	return pauses, nil
}
