package driver

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/kargo-latch/kargo-latch/kargo"
)

// Golden values computed apart from this code (Python's hashlib): at most
// 63 characters stay; longer keep 54 less trailing dashes, a dash and 8 hex
// digits of the SHA-256 of the whole.
func TestShortenLabelValueIsKargos(t *testing.T) {
	for in, want := range map[string]string{
		"test":                  "test",
		strings.Repeat("a", 63): strings.Repeat("a", 63),
		strings.Repeat("a", 64): strings.Repeat("a", 54) + "-ffe054fe",
		strings.Repeat("ab", 26) + "-----" + strings.Repeat("z", 20): strings.Repeat("ab", 26) + "-f8233cc3",
	} {
		if got := ShortenLabelValue(in); got != want {
			t.Errorf("ShortenLabelValue(%q) = %q, want %q", in, got, want)
		}
	}
}

func fakeRolloutsKargo() *Kargo {
	return New(dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		kargo.StagesResource: "StageList", kargo.PromotionsResource: "PromotionList", kargo.FreightsResource: "FreightList",
		AnalysisRunsResource: "AnalysisRunList", AnalysisTemplatesResource: "AnalysisTemplateList",
		ClusterAnalysisTemplatesResource: "ClusterAnalysisTemplateList",
	}))
}

// TestKargoStartsThenAdopts plays Kargo's verification passes: none while
// not Healthy; a Healthy pass creates the run Kargo would and records it
// Pending; a pass with a verification recorded starts none; and a new
// collection whose run already exists (made by someone else) is adopted.
func TestKargoStartsThenAdopts(t *testing.T) {
	ctx := context.Background()
	k := fakeRolloutsKargo().WithRolloutsControllerInstanceID("kargo")
	def := "fallback"
	if _, err := k.CreateAnalysisTemplate(ctx, "ns", "smoke", AnalysisTemplate{
		Metrics: []Metric{WebMetric("web", "http://127.0.0.1:1/{{args.path}}")},
		Args:    []TemplateArg{{Name: "path"}, {Name: "other", Value: &def}},
	}); err != nil {
		t.Fatal(err)
	}
	long := "a-stage-whose-name-is-much-longer-than-a-label-value-may-be-at-all"
	s, err := k.CreateStage(ctx, "ns", long, nil, WithAnalysis(Verification{
		Templates: []TemplateRef{{Name: "smoke"}},
		Args:      []Arg{{Name: "path", Value: "healthz"}, {Name: "undeclared", Value: "dropped"}},
		RunLabels: map[string]string{"team": "a"},
	}))
	if err != nil {
		t.Fatal(err)
	}
	promotion, err := s.FinishPromotion(ctx, "Succeeded")
	if err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(s.SetHealth(ctx, kargo.HealthProgressing))
	if _, _, err := s.KargoAdoptOrStartVerification(ctx); !errors.Is(err, ErrNotHealthy) {
		t.Fatalf("a pass that is not Healthy: %v, want ErrNotHealthy", err)
	}
	must(s.SetHealth(ctx, kargo.HealthHealthy))
	name, adopted, err := s.KargoAdoptOrStartVerification(ctx)
	must(err)
	if adopted {
		t.Fatal("the first pass adopted a run, none existed")
	}
	run, err := k.AnalysisRun(ctx, "ns", name)
	must(err)
	stage, err := s.Get(ctx)
	must(err)
	history, _, _ := unstructured.NestedSlice(stage.Object, "status", "freightHistory")
	collection := history[0].(map[string]any)
	id := collection["id"].(string)
	freight, err := s.CurrentFreight(ctx)
	must(err)
	if !strings.HasPrefix(name, long+".") || !strings.HasSuffix(name, "."+id) || name != strings.ToLower(name) {
		t.Errorf("run name %q, want <stage>.<ulid>.%s in lower case", name, id)
	}
	wantLabels := map[string]string{"team": "a", StageLabel: ShortenLabelValue(long), FreightCollectionLabel: id, ControllerInstanceIDLabel: "kargo"}
	if diff := cmp.Diff(wantLabels, run.GetLabels()); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	wantAnnotations := map[string]string{StageAnnotation: long, PromotionAnnotation: promotion}
	if diff := cmp.Diff(wantAnnotations, run.GetAnnotations()); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}
	if owners := run.GetOwnerReferences(); len(owners) != 1 || owners[0].Kind != "Freight" || owners[0].Name != freight ||
		owners[0].BlockOwnerDeletion == nil || *owners[0].BlockOwnerDeletion {
		t.Errorf("owner references %+v, want the Freight %s, not blocking deletion", owners, freight)
	}
	args, _, _ := unstructured.NestedSlice(run.Object, "spec", "args")
	wantArgs := []any{map[string]any{"name": "path", "value": "healthz"}, map[string]any{"name": "other", "value": "fallback"}}
	if diff := cmp.Diff(wantArgs, args); diff != "" {
		t.Errorf("args (-want +got):\n%s", diff)
	}
	vh, _ := collection["verificationHistory"].([]any)
	if len(vh) != 1 {
		t.Fatalf("verificationHistory %v, want one entry", vh)
	}
	vi := vh[0].(map[string]any)
	if vi["phase"] != "Pending" || vi["id"] == "" || vi["startTime"] == nil ||
		!cmp.Equal(vi["analysisRun"], map[string]any{"name": name, "namespace": "ns", "phase": ""}) {
		t.Errorf("verification %v, want Pending naming the run", vi)
	}
	if _, _, err := s.KargoAdoptOrStartVerification(ctx); !errors.Is(err, ErrVerificationExists) {
		t.Fatalf("a second pass: %v, want ErrVerificationExists", err)
	}

	// New Freight; someone (kargo-latch) made its run first: Kargo adopts it.
	_, err = s.FinishPromotion(ctx, "Succeeded")
	must(err)
	must(s.SetHealth(ctx, kargo.HealthHealthy))
	theirs, err := s.KargoAnalysisRun(ctx)
	must(err)
	_ = unstructured.SetNestedField(theirs.Object, "Running", "status", "phase")
	_, err = k.client.Resource(AnalysisRunsResource).Namespace("ns").Create(ctx, theirs, metav1.CreateOptions{})
	must(err)
	name, adopted, err = s.KargoAdoptOrStartVerification(ctx)
	must(err)
	if !adopted || name != theirs.GetName() {
		t.Fatalf("adopted=%v run %s, want the existing %s adopted", adopted, name, theirs.GetName())
	}
	phase, err := s.KargoFollowVerification(ctx)
	must(err)
	if phase != "Running" {
		t.Errorf("followed phase %q, want Running", phase)
	}
}
