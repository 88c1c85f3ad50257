package kargo

import (
	"encoding/json"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
)

func mustUnstructured(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatalf("bad test document: %v", err)
	}
	return u
}

const busyStage = `{
  "apiVersion": "kargo.akuity.io/v1alpha1", "kind": "Stage",
  "metadata": {
    "name": "prod", "namespace": "shop", "uid": "u1", "resourceVersion": "42",
    "creationTimestamp": "2026-11-29T10:00:00Z",
    "labels": {"kargo-latch.io/paused": "true", "team": "payments"},
    "annotations": {"kargo-latch.io/latch-deadline": "10m", "kubectl.kubernetes.io/last-applied-configuration": "{}"},
    "managedFields": [{"manager": "kargo"}]
  },
  "spec": {"requestedFreight": [{"origin": {"kind": "Warehouse", "name": "w"}, "sources": {"direct": true}}],
           "verification": {"analysisTemplates": [{"name": "smoke"}]}},
  "status": {
    "health": {"status": "Progressing", "issues": ["app is progressing"], "output": {"applicationStatuses": [{"big": "blob"}]}},
    "currentPromotion": {"name": "prod.01j.abc1234", "freight": {"name": "abc1234"}},
    "lastPromotion": {"name": "prod.01h.def5678", "finishedAt": "2026-11-29T11:00:00Z",
                      "freight": {"name": "def5678", "origin": {"kind": "Warehouse", "name": "w"}},
                      "status": {"phase": "Succeeded", "message": "ok"}},
    "freightHistory": [
      {"id": "sha-new", "items": {"Warehouse/w2": {"name": "zzz", "origin": {"kind": "Warehouse", "name": "w2"}},
                                   "Warehouse/w": {"name": "def5678", "origin": {"kind": "Warehouse", "name": "w"}}},
       "verificationHistory": [{"id": "v2", "phase": "Failed", "message": "Verification aborted by user"}, {"id": "v1", "phase": "Successful"}]},
      {"id": "sha-old"}
    ]
  }
}`

func TestStageFromUnstructured(t *testing.T) {
	finished := time.Date(2026, 11, 29, 11, 0, 0, 0, time.UTC)
	want := &Stage{
		TypeMeta: metav1.TypeMeta{APIVersion: "kargo.akuity.io/v1alpha1", Kind: "Stage"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "prod", Namespace: "shop", UID: "u1", ResourceVersion: "42",
			CreationTimestamp: metav1.NewTime(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)),
			Labels:            map[string]string{"kargo-latch.io/paused": "true"},
			Annotations:       map[string]string{"kargo-latch.io/latch-deadline": "10m"},
		},
		HasVerification: true,
		Status: &StageStatus{
			LastPromotion:    &PromotionReference{Name: "prod.01h.def5678", Phase: "Succeeded", FinishedAt: &finished, Freight: "def5678"},
			CurrentPromotion: "prod.01j.abc1234",
			Health:           "Progressing",
			FreightID:        "sha-new",
			FreightNames:     []string{"def5678", "zzz"},
			Verification:     &VerificationInfo{ID: "v2", Phase: "Failed", Message: "Verification aborted by user"},
		},
	}
	got := StageFromUnstructured(mustUnstructured(t, busyStage))
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("StageFromUnstructured mismatch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(got, got.DeepCopyObject()); diff != "" {
		t.Errorf("DeepCopy differs (-orig +copy):\n%s", diff)
	}
}

func TestStageFromOddObjects(t *testing.T) {
	for name, tc := range map[string]struct {
		doc  string
		want *Stage
	}{
		"no status": {
			doc:  `{"metadata": {"name": "a", "namespace": "p"}}`,
			want: &Stage{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "p"}},
		},
		"mistyped fields": {
			doc: `{"metadata": {"name": "a", "namespace": "p", "annotations": {"kargo-latch.io/x": 5}},
			       "status": {"health": {"status": 7}, "lastPromotion": "nope", "freightHistory": [5],
			                  "currentPromotion": {"name": ["x"]}}}`,
			want: &Stage{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "p"}, Status: &StageStatus{}},
		},
		"unparsable finish time": {
			doc: `{"metadata": {"name": "a"}, "status": {"lastPromotion": {"name": "p", "finishedAt": "soon", "status": {"phase": "Succeeded"}}}}`,
			want: &Stage{ObjectMeta: metav1.ObjectMeta{Name: "a"},
				Status: &StageStatus{LastPromotion: &PromotionReference{Name: "p", Phase: "Succeeded"}}},
		},
	} {
		t.Run(name, func(t *testing.T) {
			tc.want.TypeMeta = metav1.TypeMeta{APIVersion: "kargo.akuity.io/v1alpha1", Kind: "Stage"}
			got := StageFromUnstructured(mustUnstructured(t, tc.doc))
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestTransformAcceptsEveryShape(t *testing.T) {
	u := mustUnstructured(t, busyStage)
	first, err := TransformStage(u)
	if err != nil {
		t.Fatal(err)
	}
	again, err := TransformStage(first)
	if err != nil || again != first {
		t.Errorf("transforming a transformed Stage gave %v, %v; want it unchanged", again, err)
	}
	tomb, err := TransformStage(cache.DeletedFinalStateUnknown{Key: "shop/prod", Obj: u})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := tomb.(cache.DeletedFinalStateUnknown).Obj.(*Stage); !ok {
		t.Errorf("tombstone kept %T, want *Stage", tomb.(cache.DeletedFinalStateUnknown).Obj)
	}
}

func TestAutoPromotion(t *testing.T) {
	for actor, want := range map[string]bool{
		"":                  true,
		"controller:kargo":  true,
		"admin":             false,
		"email:a@b.example": false,
	} {
		p := &Promotion{}
		if actor != "" {
			p.Annotations = map[string]string{CreateActorAnnotation: actor}
		}
		if got := p.AutoPromotion(); got != want {
			t.Errorf("actor %q: AutoPromotion() = %v, want %v", actor, got, want)
		}
	}
}

// The mirror, both ways a Stage is read into it, leaves out a kept garbage
// record (kargo-latch.io/invalid-state): nothing reads it, and it may run to
// kilobytes on every Stage a person mangled. The other own keys stay.
func TestMirrorLeavesOutTheKeptGarbage(t *testing.T) {
	annotations, err := json.Marshal(map[string]string{
		StateAnnotation:              latchedRecord(),
		InvalidStateAnnotation:       `{"version":1,"phase":"Failed","note":"` + strings.Repeat("x", 16<<10),
		OwnPrefix + "latch-deadline": "10m",
		"example.com/foreign":        "x",
	})
	if err != nil {
		t.Fatal(err)
	}
	doc := strings.Replace(busyStage, `{"kargo-latch.io/latch-deadline": "10m", "kubectl.kubernetes.io/last-applied-configuration": "{}"}`, string(annotations), 1)
	fromMaps, ok := viaMaps([]byte(doc))
	if !ok {
		t.Fatal("bad test document")
	}
	for how, s := range map[string]*Stage{"unstructured": StageFromUnstructured(mustUnstructured(t, doc)), "maps": fromMaps, "codec": viaDocs(t, []byte(doc))} {
		if _, kept := s.Annotations[InvalidStateAnnotation]; kept || s.Annotations[OwnPrefix+"latch-deadline"] != "10m" || s.State.Value() != latchedRecord() {
			t.Errorf("%s: annotations %v, record read %v; want the latch deadline alone, the record read", how, slices.Sorted(maps.Keys(s.Annotations)), s.State.Value() == latchedRecord())
		}
	}
}
