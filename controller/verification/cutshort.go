package verification

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/latch"
)

// A run kargo-latch cuts short leaves Kargo's lookup: Kargo's two labels
// move under these keys of kargo-latch's, with why and when, so that an
// auditor still finds which Stage and Freight collection it verified
// (latch/cutshort.go says why, and in which order).
const (
	CutShortStageLabel      = "kargo-latch.io/stage"
	CutShortCollectionLabel = "kargo-latch.io/freight-collection"
	CutShortAnnotation      = "kargo-latch.io/cut-short"
	CutShortAtAnnotation    = "kargo-latch.io/cut-short-at"
)

// CutShortPatch is the merge patch that takes a run whose labels are
// labels out of Kargo's lookup: the one change of a run's metadata the
// admission guard allows kargo-latch (manifests/components/verify-on-latch).
func CutShortPatch(labels map[string]string, why string, at time.Time) []byte {
	patch := map[string]any{"metadata": map[string]any{
		"labels": map[string]any{
			StageLabel:              nil,
			FreightCollectionLabel:  nil,
			CutShortStageLabel:      labels[StageLabel],
			CutShortCollectionLabel: labels[FreightCollectionLabel],
		},
		"annotations": map[string]any{
			CutShortAnnotation:   latch.Bounded(why),
			CutShortAtAnnotation: at.UTC().Format(time.RFC3339),
		},
	}}
	b, _ := json.Marshal(patch)
	return b
}

// CutShort takes kargo-latch's run out of Kargo's lookup, read live: only
// a run that carries kargo-latch's marker and both of Kargo's labels is
// patched. A run already cut short, or gone, needs nothing.
func (s *Starter) CutShort(ctx context.Context, namespace, name, why string, at time.Time) error {
	runs := s.Dynamic.Resource(AnalysisRunsResource).Namespace(namespace)
	u, err := runs.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading AnalysisRun %s/%s: %w", namespace, name, err)
	}
	l := u.GetLabels()
	if l[MarkerLabel] != MarkerValue || l[StageLabel] == "" || l[FreightCollectionLabel] == "" {
		return nil
	}
	_, err = runs.Patch(ctx, name, types.MergePatchType, CutShortPatch(l, why, at), metav1.PatchOptions{FieldManager: api.FieldManager})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// cutShortOf reads a run's cut-short annotations.
func cutShortOf(u *unstructured.Unstructured) (why string, at *time.Time) {
	a := u.GetAnnotations()
	why = a[CutShortAnnotation]
	if why == "" {
		return "", nil
	}
	if t, err := time.Parse(time.RFC3339, a[CutShortAtAnnotation]); err == nil {
		at = &t
	}
	return why, at
}
