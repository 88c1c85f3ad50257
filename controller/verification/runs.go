package verification

import (
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kargo-latch/kargo-latch/latch"
)

// The Argo Rollouts resources verify-on-latch reads and writes.
var (
	AnalysisRunsResource             = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "analysisruns"}
	AnalysisTemplatesResource        = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "analysistemplates"}
	ClusterAnalysisTemplatesResource = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "clusteranalysistemplates"}
)

// OwnRunsSelector selects the AnalysisRuns kargo-latch made: the only ones
// its cache holds, so that a project's other runs cost it nothing.
var OwnRunsSelector = MarkerLabel + "=" + MarkerValue

// StageIndex indexes cached runs by "<namespace>/<kargo.akuity.io/stage>".
const StageIndex = "stage"

// IndexByStage is the StageIndex function.
func IndexByStage(obj any) ([]string, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	stage := stageLabelOf(u)
	if stage == "" {
		return nil, nil
	}
	return []string{StageKey(u.GetNamespace(), stage)}, nil
}

// stageLabelOf is a run's Stage label: Kargo's, or, once kargo-latch cut
// the run short, the copy under kargo-latch's own key.
func stageLabelOf(u *unstructured.Unstructured) string {
	l := u.GetLabels()
	if stage := l[StageLabel]; stage != "" {
		return stage
	}
	if l[MarkerLabel] != MarkerValue {
		return ""
	}
	return l[CutShortStageLabel]
}

// StageKey is the StageIndex key of a Stage's runs, from its name (Kargo's
// label holds it shortened when long).
func StageKey(namespace, stage string) string {
	return namespace + "/" + ShortenLabelValue(stage)
}

// StageOf names the Stage a run verifies: the kargo.akuity.io/stage
// annotation holds the full name where the label had to be shortened.
func StageOf(u *unstructured.Unstructured) string {
	label := stageLabelOf(u)
	// The annotation counts only as the label's full form: a run's
	// metadata comes partly from a Stage's analysisRunMetadata, which must
	// not move it to another Stage.
	if full := u.GetAnnotations()[StageAnnotation]; full != "" && ShortenLabelValue(full) == label {
		return full
	}
	return label
}

// TransformRun keeps of a cached AnalysisRun only what verify-on-latch
// judges: its metadata's name, labels and stage annotation, whether it is
// told to terminate, and its phase, message and times. Metrics results,
// which can be large, are dropped.
func TransformRun(obj any) (any, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return obj, nil
	}
	slim := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": u.GetAPIVersion(), "kind": u.GetKind(),
	}}
	slim.SetName(u.GetName())
	slim.SetNamespace(u.GetNamespace())
	slim.SetUID(u.GetUID())
	slim.SetResourceVersion(u.GetResourceVersion())
	slim.SetCreationTimestamp(u.GetCreationTimestamp())
	slim.SetLabels(u.GetLabels())
	kept := map[string]string{}
	for _, key := range []string{StageAnnotation, CutShortAnnotation, CutShortAtAnnotation} {
		if v := u.GetAnnotations()[key]; v != "" {
			kept[key] = v[:min(len(v), maxCachedField)]
		}
	}
	if len(kept) > 0 {
		slim.SetAnnotations(kept)
	}
	if t, _, _ := unstructured.NestedBool(u.Object, "spec", "terminate"); t {
		_ = unstructured.SetNestedField(slim.Object, true, "spec", "terminate")
	}
	for _, f := range []string{"phase", "message", "startedAt", "completedAt"} {
		if v, ok, _ := unstructured.NestedString(u.Object, "status", f); ok {
			if len(v) > maxCachedField {
				// A run's message can be a metric's whole error output.
				v = v[:maxCachedField]
			}
			_ = unstructured.SetNestedField(slim.Object, v, "status", f)
		}
	}
	return slim, nil
}

// maxCachedField bounds each status string the cache keeps of a run; the
// record bounds its own copy further (latch.MaxMessage).
const maxCachedField = 4 * latch.MaxMessage

// RunFrom is the latch's view of an AnalysisRun.
func RunFrom(u *unstructured.Unstructured) latch.Run {
	r := latch.Run{
		Name:       u.GetName(),
		Collection: u.GetLabels()[FreightCollectionLabel],
		Ours:       u.GetLabels()[MarkerLabel] == MarkerValue,
		Created:    u.GetCreationTimestamp().Time,
	}
	phase, _, _ := unstructured.NestedString(u.Object, "status", "phase")
	r.Phase = latch.VerificationPhase(phase)
	r.Message, _, _ = unstructured.NestedString(u.Object, "status", "message")
	r.StartedAt = timeAt(u, "startedAt")
	r.FinishedAt = timeAt(u, "completedAt")
	r.Terminating, _, _ = unstructured.NestedBool(u.Object, "spec", "terminate")
	if r.Ours {
		r.CutShort, r.CutShortAt = cutShortOf(u)
	}
	return r
}

func timeAt(u *unstructured.Unstructured, field string) *time.Time {
	v, _, _ := unstructured.NestedString(u.Object, "status", field)
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return nil
	}
	return &t
}
