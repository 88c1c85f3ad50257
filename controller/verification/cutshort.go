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
	"github.com/kargo-latch/kargo-latch/kargo"
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
// labels, at resourceVersion, out of Kargo's lookup: the one change of a run's metadata the
// admission guard allows kargo-latch (manifests/components/verify-on-latch).
func CutShortPatch(labels map[string]string, why string, at time.Time, resourceVersion string) []byte {
	patch := map[string]any{"metadata": map[string]any{
		"resourceVersion": resourceVersion,
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
// patched, and only as read (the patch names the resourceVersion read).
// patched is false when there was nothing to do: the run is gone, or
// already out of the lookup.
func (s *Starter) CutShort(ctx context.Context, namespace, name, why string, at time.Time) (patched bool, err error) {
	u, err := s.readRun(ctx, namespace, name)
	if u == nil || err != nil {
		return false, err
	}
	l := u.GetLabels()
	if l[MarkerLabel] != MarkerValue || l[StageLabel] == "" || l[FreightCollectionLabel] == "" {
		return false, nil
	}
	_, err = s.Dynamic.Resource(AnalysisRunsResource).Namespace(namespace).Patch(ctx, name, types.MergePatchType,
		CutShortPatch(l, why, at, u.GetResourceVersion()), metav1.PatchOptions{FieldManager: api.FieldManager})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// readRun reads a run live; nil when it is gone.
func (s *Starter) readRun(ctx context.Context, namespace, name string) (*unstructured.Unstructured, error) {
	u, err := s.Dynamic.Resource(AnalysisRunsResource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading AnalysisRun %s/%s: %w", namespace, name, err)
	}
	return u, nil
}

// KargoFollows reads the Stage live and reports whether any verification
// in Kargo's status (of the current Freight collection or an earlier one)
// names run: Kargo adopted it, so it is Kargo's, and kargo-latch never
// patches it. A Stage gone verifies nothing.
func (s *Starter) KargoFollows(ctx context.Context, namespace, stage, run string) (bool, error) {
	u, err := s.Dynamic.Resource(kargo.StagesResource).Namespace(namespace).Get(ctx, stage, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading Stage %s/%s: %w", namespace, stage, err)
	}
	history, _, _ := unstructured.NestedSlice(u.Object, "status", "freightHistory")
	for _, c := range history {
		collection, _ := c.(map[string]any)
		verifications, _ := collection["verificationHistory"].([]any)
		for _, vi := range verifications {
			if m, ok := vi.(map[string]any); ok {
				if name, _, _ := unstructured.NestedString(m, "analysisRun", "name"); name == run {
					return true, nil
				}
			}
		}
	}
	return false, nil
}

// cutShortOf reads whether a run of kargo-latch's was cut short: by its
// labels alone, Kargo's two gone and kargo-latch's copy there, since only
// the labels keep Kargo from adopting it. Its annotations, which a Stage's
// analysisRunMetadata or anyone may also set, only say why and when; a run
// still in Kargo's lookup is never taken as cut short, whatever they say.
func cutShortOf(u *unstructured.Unstructured) (why string, at *time.Time) {
	l, a := u.GetLabels(), u.GetAnnotations()
	if l[StageLabel] != "" || l[FreightCollectionLabel] != "" || l[CutShortStageLabel] == "" {
		return "", nil
	}
	why = a[CutShortAnnotation]
	if why == "" {
		why = "taken out of Kargo's lookup (no reason recorded)"
	}
	if t, err := time.Parse(time.RFC3339, a[CutShortAtAnnotation]); err == nil {
		at = &t
	}
	return why, at
}
