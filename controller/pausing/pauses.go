package pausing

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/types"

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
