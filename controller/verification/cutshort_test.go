package verification

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// ownRunObject is a run of kargo-latch's for Stage test and collection c1.
func ownRunObject(name string, labels map[string]string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "argoproj.io/v1alpha1", "kind": "AnalysisRun"}}
	u.SetName(name)
	u.SetNamespace("demo")
	l := map[string]string{StageLabel: "test", FreightCollectionLabel: "c1", MarkerLabel: MarkerValue, "team": "a"}
	for k, v := range labels {
		l[k] = v
	}
	u.SetLabels(l)
	return u
}

func TestCutShortMovesTheLookupLabels(t *testing.T) {
	c := starterWorld(t, ownRunObject("ours", nil))
	at := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	if patched, err := (&Starter{Dynamic: c}).CutShort(context.Background(), "demo", "ours", "the cycle it verifies failed (Degraded)", at); err != nil || !patched {
		t.Fatalf("CutShort = %v, %v", patched, err)
	}
	got, err := c.Resource(AnalysisRunsResource).Namespace("demo").Get(context.Background(), "ours", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{CutShortStageLabel: "test", CutShortCollectionLabel: "c1", MarkerLabel: MarkerValue, "team": "a"}
	if diff := cmp.Diff(want, got.GetLabels()); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{CutShortAnnotation: "the cycle it verifies failed (Degraded)", CutShortAtAnnotation: "2026-12-07T10:00:00Z"}, got.GetAnnotations()); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}
	if terminate, _, _ := unstructured.NestedBool(got.Object, "spec", "terminate"); terminate {
		t.Error("cut short and terminated at once: a run out of the lookup goes on to a true result first")
	}
	// The cache still indexes it under its Stage, and reads it as cut short.
	if keys, _ := IndexByStage(got); !cmp.Equal(keys, []string{"demo/test"}) {
		t.Errorf("index keys = %v", keys)
	}
	r := RunFrom(got)
	if r.CutShort == "" || r.CutShortAt == nil || !r.CutShortAt.Equal(at) || r.Collection != "" || StageOf(got) != "test" {
		t.Errorf("run = %+v, stage %q", r, StageOf(got))
	}
	// Kargo's lookup no longer finds it.
	runs, err := (&Starter{Dynamic: c}).Lookup(context.Background(), "demo", "test", "c1")
	if err != nil || len(runs) != 0 {
		t.Errorf("lookup = %v, %v; want nothing", runs, err)
	}
	// Again: nothing to do (already out of the lookup).
	before := len(c.Actions())
	if patched, err := (&Starter{Dynamic: c}).CutShort(context.Background(), "demo", "ours", "again", at); err != nil || patched {
		t.Fatalf("CutShort again = %v, %v; want nothing done", patched, err)
	}
	for _, a := range c.Actions()[before:] {
		if a.GetVerb() == "patch" {
			t.Error("patched a run already cut short")
		}
	}
}

func TestCutShortLeavesOthersRunsAlone(t *testing.T) {
	theirs := ownRunObject("kargos", map[string]string{MarkerLabel: ""})
	c := starterWorld(t, theirs)
	if patched, err := (&Starter{Dynamic: c}).CutShort(context.Background(), "demo", "kargos", "x", time.Now()); err != nil || patched {
		t.Fatalf("CutShort = %v, %v; want nothing done", patched, err)
	}
	for _, a := range c.Actions() {
		if a.GetVerb() == "patch" {
			t.Error("patched a run kargo-latch did not make")
		}
	}
	// A cut-short label on someone else's run moves it to no Stage.
	other := ownRunObject("x", map[string]string{MarkerLabel: "", StageLabel: "", CutShortStageLabel: "test"})
	if keys, _ := IndexByStage(other); len(keys) != 0 {
		t.Errorf("someone's run indexed under %v", keys)
	}
}

func TestPickupHintNamesAnInstanceMismatch(t *testing.T) {
	kargos := ownRunObject("kargos", map[string]string{MarkerLabel: "", InstanceIDLabel: "kargo-rollouts"})
	delete(kargos.Object["metadata"].(map[string]any)["labels"].(map[string]any), MarkerLabel)
	c := starterWorld(t, kargos)
	hint := (&Starter{Dynamic: c}).PickupHint(context.Background(), "demo")
	if !strings.Contains(hint, "mismatch") || !strings.Contains(hint, "controller-instance-id=kargo-rollouts") || !strings.Contains(hint, "with no controller-instance-id label") {
		t.Errorf("hint = %q", hint)
	}
	same := (&Starter{Dynamic: c, InstanceID: "kargo-rollouts"}).PickupHint(context.Background(), "demo")
	if strings.Contains(same, "mismatch") || !strings.Contains(same, "--instance-id kargo-rollouts") {
		t.Errorf("hint with the same id = %q", same)
	}
}

// A run still in Kargo's lookup is never taken as cut short, whatever its
// annotations say (a Stage's analysisRunMetadata can set them), and is
// never terminated: Argo Rollouts would end it Successful, which Kargo's
// lookup would adopt.
func TestARunInTheLookupIsNeverCutShortByItsAnnotations(t *testing.T) {
	planted := ownRunObject("planted", nil)
	planted.SetAnnotations(map[string]string{CutShortAnnotation: "planted", CutShortAtAnnotation: "2026-01-01T00:00:00Z"})
	if r := RunFrom(planted); r.CutShort != "" || r.CutShortAt != nil {
		t.Errorf("run in the lookup read as cut short: %+v", r)
	}
	c := starterWorld(t, planted)
	err := (&Starter{Dynamic: c}).Terminate(context.Background(), "demo", "planted")
	if !errors.Is(err, ErrInLookup) {
		t.Fatalf("Terminate = %v, want ErrInLookup", err)
	}
	for _, a := range c.Actions() {
		if a.GetVerb() == "patch" {
			t.Error("patched a run still in Kargo's lookup")
		}
	}
}
