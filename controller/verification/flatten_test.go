package verification

import (
	"context"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Kargo v1.11.2 decodes templates into its copy of Argo Rollouts v1.9's
// types, which carry these provider fields: its run keeps them, and so must
// kargo-latch's (it refused them as fields "Kargo would drop").
func TestBuildKeepsProviderFieldsKargoCarries(t *testing.T) {
	tests := []struct {
		name     string
		provider string // the errors metric's provider, as YAML
	}{
		{"prometheus.rangeQuery", `
prometheus:
  address: 'http://prometheus:9090'
  query: 'sum(rate(errors[1m]))'
  rangeQuery: {start: 'now() - duration("10m")', end: 'now()', step: 1m}`},
		{"newRelic.timeout", `
newRelic: {profile: nr, query: 'SELECT count(*) FROM Transaction', timeout: 30}`},
		{"datadog.aggregator and secretRef", `
datadog:
  apiVersion: v2
  queries: {a: 'sum:errors{*}.as_count()'}
  formula: a
  aggregator: sum
  secretRef: {name: datadog-demo, namespaced: true}`},
		{"kayenta.lookback", `
kayenta:
  address: 'http://kayenta:8090'
  application: app
  canaryConfigName: canary
  metricsAccountName: m
  configurationAccountName: c
  storageAccountName: s
  threshold: {pass: 90, marginal: 75}
  scopes:
  - name: default
    controlScope: {scope: app, region: eu, step: 60, start: a, end: b}
    experimentScope: {scope: app, region: eu, step: 60, start: a, end: b}
  lookback: true`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			metric := object(t, "name: errors\nprovider:"+indent(tt.provider, "  ")).Object
			in := fullInput(t)
			in.Templates[TemplateRef{KindAnalysisTemplate, "error-rate"}] = &unstructured.Unstructured{Object: map[string]any{
				"spec": map[string]any{
					"args":    []any{map[string]any{"name": "commit"}},
					"metrics": []any{metric},
				},
			}}
			run, err := Build(in)
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			metrics, _, _ := unstructured.NestedSlice(run.Object, "spec", "metrics")
			var got any
			for _, m := range metrics {
				if m.(map[string]any)["name"] == "errors" {
					got = m
				}
			}
			if diff := cmp.Diff(any(metric), got); diff != "" {
				t.Errorf("the run's errors metric (-template +run):\n%s", diff)
			}
		})
	}
}

// Kargo's builder fetches only the templates spec.verification names and
// merges only their metrics, args, dryRun and measurementRetention: a
// template's spec.templates references are never read, and an AnalysisRun
// has no such field. The run is the one built without them.
func TestBuildLeavesNestedTemplateReferencesUnread(t *testing.T) {
	nested := `
templates:
- templateName: not-there
- {templateName: shared-check, clusterScope: true}
- {templateName: web-check, futureField: x}`
	tests := []struct {
		name string
		edit func(t *testing.T, in *Input)
	}{
		{"beside the template's own metrics", func(t *testing.T, in *Input) {
			addToSpec(t, in, TemplateRef{KindAnalysisTemplate, "error-rate"}, nested)
		}},
		{"in a ClusterAnalysisTemplate", func(t *testing.T, in *Input) {
			addToSpec(t, in, TemplateRef{KindClusterAnalysisTemplate, "shared-check"}, nested)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want, err := Build(fullInput(t))
			if err != nil {
				t.Fatalf("Build without references: %v", err)
			}
			in := fullInput(t)
			tt.edit(t, &in)
			got, err := Build(in)
			if err != nil {
				t.Fatalf("Build: %v", err)
			}
			if diff := cmp.Diff(want.Object["spec"], got.Object["spec"]); diff != "" {
				t.Errorf("run spec (-without references +with them):\n%s", diff)
			}
		})
	}
}

// A run is started for a template with spec.templates without reading the
// templates it names, as Kargo reads none: one that does not exist stops
// nothing.
func TestStartReadsNoNestedTemplate(t *testing.T) {
	c := starterWorld(t)
	errorRate := object(t, errorRateYAML)
	_ = unstructured.SetNestedSlice(errorRate.Object, []any{map[string]any{"templateName": "not-there"}}, "spec", "templates")
	if _, err := c.Resource(AnalysisTemplatesResource).Namespace("demo").Update(context.Background(), errorRate, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	runs, created, err := (&Starter{Dynamic: c}).Start(context.Background(), "demo", "test", collectionID, fullInput(t).Name)
	if err != nil || !created || len(runs) != 1 {
		t.Fatalf("Start = %+v, created %v, %v; want the run made", runs, created, err)
	}
	for _, a := range c.Actions() {
		if a.GetVerb() == "get" && strings.Contains(a.GetResource().Resource, "analysistemplates") {
			if name := a.(interface{ GetName() string }).GetName(); name == "not-there" {
				t.Errorf("the nested template %q was read", name)
			}
		}
	}
}

// A field outside Kargo's types is refused with the true reason: Kargo
// drops it for sure (Argo Rollouts knows it, Kargo's copy of its types does
// not), or kargo-latch does not know whether Kargo's types carry it.
func TestBuildUnknownFieldMessages(t *testing.T) {
	tests := []struct {
		name, spec, want string
	}{
		{"datadog.requestTimeout, newer than Kargo's types", `
metrics: [{name: dd, provider: {datadog: {query: q, requestTimeout: 30s}}}]`,
			`AnalysisTemplate "error-rate": Kargo v1.11.2 drops field spec.metrics[0].provider.datadog.requestTimeout (its copy of the Argo Rollouts types lacks it), so Kargo's run would not do what the template says; kargo-latch starts no such run`},
		{"a field no one knows", `
metrics: [{name: e, provider: {web: {url: x, newField: y}}}]`,
			`AnalysisTemplate "error-rate": field spec.metrics[0].provider.web.newField is not one kargo-latch knows Kargo v1.11.2's AnalysisTemplate types to carry (Kargo drops the fields they lack), so kargo-latch cannot build the run exactly as Kargo would`},
		{"a spec field of runs only", `
ttlStrategy: {secondsAfterCompletion: 60}`,
			`AnalysisTemplate "error-rate": field spec.ttlStrategy is not one kargo-latch knows Kargo v1.11.2's AnalysisTemplate types to carry (Kargo drops the fields they lack), so kargo-latch cannot build the run exactly as Kargo would`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := fullInput(t)
			in.Templates[TemplateRef{KindAnalysisTemplate, "error-rate"}] = object(t, "spec:"+indent(tt.spec, "  "))
			run, err := Build(in)
			u, ok := IsUnsupported(err)
			if !ok || run != nil {
				t.Fatalf("Build = %v, %v; want an *Unsupported error and no run", run, err)
			}
			if diff := cmp.Diff(Unsupported{Reason: ReasonUnknownField, Message: tt.want}, *u); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
		})
	}
}

// addToSpec merges YAML fields into a template's spec.
func addToSpec(t *testing.T, in *Input, ref TemplateRef, doc string) {
	t.Helper()
	tmpl := in.Templates[ref]
	spec, _ := tmpl.Object["spec"].(map[string]any)
	for k, v := range object(t, doc).Object {
		spec[k] = v
	}
}

func indent(doc, prefix string) string {
	return strings.ReplaceAll(doc, "\n", "\n"+prefix)
}
