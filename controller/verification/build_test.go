package verification

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
)

func TestBuildGolden(t *testing.T) {
	in := fullInput(t)
	got, err := Build(in)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	want := object(t, `
apiVersion: argoproj.io/v1alpha1
kind: AnalysisRun
metadata:
  name: `+in.Name+`
  namespace: demo
  labels:
    team: payments
    kargo.akuity.io/stage: test
    kargo.akuity.io/freight-collection: `+collectionID+`
    kargo-latch.io/started-by: kargo-latch
  annotations:
    owner: sre
    kargo.akuity.io/promotion: test.01jabc.1234567
  ownerReferences:
  - {apiVersion: kargo.akuity.io/v1alpha1, kind: Freight, name: f-config, uid: uid-config, blockOwnerDeletion: false}
  - {apiVersion: kargo.akuity.io/v1alpha1, kind: Freight, name: f-images, uid: uid-images, blockOwnerDeletion: false}
spec:
  metrics:
  - name: web
    interval: 5s
    count: 3
    successCondition: result == "ok"
    provider:
      web: {url: '{{args.url}}', jsonPath: '{$.status}'}
  - name: errors
    failureLimit: 1
    provider:
      prometheus: {address: 'http://prometheus:9090', query: 'sum(rate(errors[1m]))'}
  - name: shared
    provider:
      web: {url: '{{args.url}}/shared', headers: [{key: Authorization, value: '{{args.token}}'}]}
  args:
  - {name: url, value: 'http://checker.demo.svc/test/v1.4.2'}
  - {name: commit, value: 9f8e7d6c}
  - name: token
    valueFrom: {secretKeyRef: {name: checker, key: token}}
  dryRun:
  - metricName: web
  measurementRetention:
  - {metricName: shared, limit: 5}
`)
	if diff := cmp.Diff(want.Object, got.Object); diff != "" {
		t.Errorf("run (-want +got):\n%s", diff)
	}
	// Building never writes into the caller's templates.
	if diff := cmp.Diff(object(t, webCheckYAML).Object, in.Templates[TemplateRef{KindAnalysisTemplate, "web-check"}].Object); diff != "" {
		t.Errorf("template changed (-before +after):\n%s", diff)
	}
}

func TestBuildMetadata(t *testing.T) {
	long := strings.Repeat("long-stage-name-", 5) // 80 characters
	tests := []struct {
		name            string
		edit            func(*Input)
		wantLabels      map[string]string
		wantAnnotations map[string]string
	}{{
		name: "a long stage name is shortened in the label and kept in an annotation",
		edit: func(in *Input) { in.Source.Stage = long },
		wantLabels: map[string]string{
			StageLabel: ShortenLabelValue(long), "team": "payments",
			FreightCollectionLabel: collectionID, MarkerLabel: MarkerValue,
		},
		wantAnnotations: map[string]string{
			StageAnnotation: long, PromotionAnnotation: "test.01jabc.1234567", "owner": "sre",
		},
	}, {
		name: "the controller instance id becomes a label",
		edit: func(in *Input) { in.InstanceID = "shard-a" },
		wantLabels: map[string]string{
			StageLabel: "test", "team": "payments", FreightCollectionLabel: collectionID,
			InstanceIDLabel: "shard-a", MarkerLabel: MarkerValue,
		},
		wantAnnotations: map[string]string{PromotionAnnotation: "test.01jabc.1234567", "owner": "sre"},
	}, {
		name: "no promotion annotation once the collection has a verification",
		edit: func(in *Input) { in.Source.Collection.Verifications = 1; in.Source.Annotations = nil },
		wantLabels: map[string]string{
			StageLabel: "test", "team": "payments", FreightCollectionLabel: collectionID, MarkerLabel: MarkerValue,
		},
	}, {
		name: "the marker wins over a user label of the same key",
		edit: func(in *Input) { in.Source.Labels = map[string]string{MarkerLabel: "someone"} },
		wantLabels: map[string]string{
			StageLabel: "test", FreightCollectionLabel: collectionID, MarkerLabel: MarkerValue,
		},
		wantAnnotations: map[string]string{PromotionAnnotation: "test.01jabc.1234567", "owner": "sre"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := fullInput(t)
			tt.edit(&in)
			got, err := Build(in)
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			if diff := cmp.Diff(tt.wantLabels, got.GetLabels()); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantAnnotations, got.GetAnnotations()); diff != "" {
				t.Errorf("annotations (-want +got):\n%s", diff)
			}
		})
	}
}

func TestBuildUnsupported(t *testing.T) {
	template := func(doc string) func(*Input) {
		return func(in *Input) {
			in.Templates[TemplateRef{KindAnalysisTemplate, "error-rate"}] = object(t, doc)
		}
	}
	tests := []struct {
		name string
		edit func(*Input)
		want string
	}{
		{"no verification", func(in *Input) { in.Source.Configured = false }, ReasonNotConfigured},
		{"no collection", func(in *Input) { in.Source.Collection.ID = "" }, ReasonNotConfigured},
		{"missing template", func(in *Input) {
			delete(in.Templates, TemplateRef{KindClusterAnalysisTemplate, "shared-check"})
		}, ReasonTemplate},
		{"a cluster template is not found under the namespaced kind", func(in *Input) {
			in.Templates[TemplateRef{KindAnalysisTemplate, "shared-check"}] = in.Templates[TemplateRef{KindClusterAnalysisTemplate, "shared-check"}]
			delete(in.Templates, TemplateRef{KindClusterAnalysisTemplate, "shared-check"})
		}, ReasonTemplate},
		{"duplicate metric", template(`{spec: {metrics: [{name: web, provider: {web: {url: x}}}]}}`), ReasonMerge},
		{"duplicate dry-run metric", template(`{spec: {dryRun: [{metricName: web}]}}`), ReasonMerge},
		{"duplicate measurement retention", template(`{spec: {measurementRetention: [{metricName: shared, limit: 1}]}}`), ReasonMerge},
		{"conflicting template args", template(`{spec: {args: [{name: commit, value: other}]}}`), ReasonMerge},
		{"an arg left without value or valueFrom", template(`{spec: {args: [{name: region}]}}`), ReasonMerge},
		{"an empty stage value does not resolve an arg", func(in *Input) {
			template(`{spec: {args: [{name: region}]}}`)(in)
			in.Source.Args = append(in.Source.Args, Arg{Name: "region"})
		}, ReasonMerge},
		{"a template field Kargo's types drop", template(`{spec: {metrics: [{name: e, provider: {web: {url: x, newField: y}}}]}}`), ReasonUnknownField},
		{"an unknown provider", template(`{spec: {metrics: [{name: e, provider: {someNewProvider: {}}}]}}`), ReasonUnknownField},
		{"an unknown spec field", template(`{spec: {ttlStrategy: {}}}`), ReasonUnknownField},
		{"an expression that fails", func(in *Input) { in.Source.Args[0].Value = "${{ vars.nope.deeper }}" }, ReasonExpression},
		{"an unclosed expression", func(in *Input) { in.Source.Args[0].Value = "${{ ctx.stage" }, ReasonExpression},
		{"a non-string result", func(in *Input) { in.Source.Args[0].Value = "${{ 1 + 1 }}" }, ReasonExpression},
		{"a result that reads as a bool", func(in *Input) { in.Source.Args[0].Value = "${{ ctx.stage == 'test' }}" }, ReasonExpression},
		{"a var that fails", func(in *Input) { in.Source.Vars[0].Value = "${{ nope() }}" }, ReasonExpression},
		{"configMap()", func(in *Input) { in.Source.Args[0].Value = `${{ configMap("settings").url }}` }, ReasonFunction},
		{"secret() in a var", func(in *Input) { in.Source.Vars[0].Value = `${{ secret("creds").token }}` }, ReasonFunction},
		{"an unused arg still fails", func(in *Input) { in.Source.Args[2].Value = `${{ sharedSecret("x").y }}` }, ReasonFunction},
		{"a printed Freight value", func(in *Input) {
			in.Source.Args[0].Value = `${{ string(imageFrom("ghcr.io/example/app")) }}`
		}, ReasonFunction},
		{"the clock", func(in *Input) { in.Source.Args[0].Value = `${{ string(now()) }}` }, ReasonExpression},
		{"a missing Freight object", func(in *Input) { in.Freight = in.Freight[:1] }, ReasonFreight},
		{"a Freight object without uid", func(in *Input) { in.Freight[0].SetUID("") }, ReasonFreight},
		{"a Warehouse needed to infer an origin", func(in *Input) { delete(in.Warehouses, "images") }, ReasonExpression},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := fullInput(t)
			tt.edit(&in)
			run, err := Build(in)
			if got := reasonOf(t, err); got != tt.want {
				t.Fatalf("reason = %q, want %q (err %v)", got, tt.want, err)
			}
			if run != nil {
				t.Errorf("a run was built: %v", run.Object)
			}
		})
	}
}

func TestBuildTemplatesOrderAndOverride(t *testing.T) {
	// Kargo combines every AnalysisTemplate before any ClusterAnalysisTemplate,
	// whatever the list order; a Stage arg overrides a template value; a
	// valueFrom of a later template never replaces an earlier arg.
	in := fullInput(t)
	in.Source.Templates = []TemplateRef{{KindClusterAnalysisTemplate, "shared-check"}, {KindAnalysisTemplate, "web-check"}}
	in.Templates[TemplateRef{KindAnalysisTemplate, "web-check"}] = object(t, `
spec:
  args: [{name: url, value: 'http://default'}, {name: token, value: plain}]
  metrics: [{name: web, provider: {web: {url: '{{args.url}}'}}}]
`)
	in.Source.Args = []Arg{{Name: "url", Value: "http://override"}, {Name: "url", Value: "http://last-wins"}}
	got, err := Build(in)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	var names []string
	metrics, _, _ := unstructured.NestedSlice(got.Object, "spec", "metrics")
	for _, m := range metrics {
		names = append(names, m.(map[string]any)["name"].(string))
	}
	if diff := cmp.Diff([]string{"web", "shared"}, names); diff != "" {
		t.Errorf("metric order (-want +got):\n%s", diff)
	}
	args, _, _ := unstructured.NestedSlice(got.Object, "spec", "args")
	want := []any{
		map[string]any{"name": "url", "value": "http://last-wins"},
		map[string]any{"name": "token", "value": "plain"},
	}
	if diff := cmp.Diff(want, args); diff != "" {
		t.Errorf("args (-want +got):\n%s", diff)
	}
}

func TestParseStageWithoutVerification(t *testing.T) {
	stage := object(t, stageYAML)
	unstructured.RemoveNestedField(stage.Object, "spec", "verification")
	src, err := ParseStage(stage)
	if err != nil {
		t.Fatalf("ParseStage: %v", err)
	}
	if src.Configured || len(src.Templates) != 0 {
		t.Errorf("Configured = %v, Templates = %v; want none", src.Configured, src.Templates)
	}
	if src.Collection.ID != collectionID || len(src.Collection.Freight) != 2 {
		t.Errorf("collection = %+v", src.Collection)
	}
}

func TestParseStageTargetAwarePromotion(t *testing.T) {
	stage := object(t, stageYAML)
	_ = unstructured.SetNestedSlice(stage.Object, []any{map[string]any{"name": "t"}}, "spec", "targets")
	_ = unstructured.SetNestedField(stage.Object, "request-7", "status", "lastPromotionRequest", "name")
	src, err := ParseStage(stage)
	if err != nil {
		t.Fatalf("ParseStage: %v", err)
	}
	if src.LastPromotion != "request-7" {
		t.Errorf("LastPromotion = %q, want the last PromotionRequest", src.LastPromotion)
	}
}

func TestKargoLookupFindsTheRun(t *testing.T) {
	// Kargo's findExistingAnalysisRun lists runs in the project namespace with
	// the selector {stage: ShortenLabelValue(stage name), freight-collection:
	// id}; the run kargo-latch builds must match it, or Kargo would start a
	// second analysis. A run of another collection must not.
	for _, stage := range []string{"test", strings.Repeat("a-very-long-stage-name", 4)} {
		in := fullInput(t)
		in.Source.Stage = stage
		run, err := Build(in)
		if err != nil {
			t.Fatalf("Build: %v", err)
		}
		kargo := labels.SelectorFromSet(labels.Set{StageLabel: ShortenLabelValue(stage), FreightCollectionLabel: collectionID})
		if run.GetNamespace() != "demo" || !kargo.Matches(labels.Set(run.GetLabels())) {
			t.Errorf("stage %q: Kargo's lookup %v in demo misses the run %s/%s %v",
				stage, kargo, run.GetNamespace(), run.GetName(), run.GetLabels())
		}
		other := labels.SelectorFromSet(labels.Set{StageLabel: ShortenLabelValue(stage), FreightCollectionLabel: "another"})
		if other.Matches(labels.Set(run.GetLabels())) {
			t.Errorf("stage %q: a lookup for another collection matches the run", stage)
		}
	}
}

func TestParseStageMalformed(t *testing.T) {
	for name, edit := range map[string]func(map[string]any){
		"verification is not an object": func(o map[string]any) {
			_ = unstructured.SetNestedField(o, "yes", "spec", "verification")
		},
		"a template entry is not an object": func(o map[string]any) {
			_ = unstructured.SetNestedSlice(o, []any{"web-check"}, "spec", "verification", "analysisTemplates")
		},
		"labels are not strings": func(o map[string]any) {
			_ = unstructured.SetNestedField(o, map[string]any{"a": int64(1)}, "spec", "verification", "analysisRunMetadata", "labels")
		},
		"a freight item is not an object": func(o map[string]any) {
			_ = unstructured.SetNestedSlice(o, []any{map[string]any{"id": "c", "items": map[string]any{"Warehouse/x": "f"}}}, "status", "freightHistory")
		},
	} {
		t.Run(name, func(t *testing.T) {
			stage := object(t, stageYAML)
			edit(stage.Object)
			if src, err := ParseStage(stage); err == nil {
				t.Errorf("ParseStage = %+v, want an error", src)
			}
		})
	}
}
