package driver

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
)

// Argo Rollouts' analysis resources (argoproj.io/v1alpha1), whose CRDs
// `make rollouts` copies from its module into bin/rollouts-crds.
var (
	rolloutsGroupVersion             = schema.GroupVersion{Group: "argoproj.io", Version: "v1alpha1"}
	AnalysisTemplatesResource        = rolloutsGroupVersion.WithResource("analysistemplates")
	ClusterAnalysisTemplatesResource = rolloutsGroupVersion.WithResource("clusteranalysistemplates")
	AnalysisRunsResource             = rolloutsGroupVersion.WithResource("analysisruns")
)

// The labels and annotations Kargo puts on the AnalysisRuns it creates
// (kargo-api-facts.md §12.3), and by whose labels it finds them again.
const (
	StageLabel             = "kargo.akuity.io/stage"
	FreightCollectionLabel = "kargo.akuity.io/freight-collection"
	StageAnnotation        = "kargo.akuity.io/stage"     // the full name, when the label had to be shortened
	PromotionAnnotation    = "kargo.akuity.io/promotion" // status.lastPromotion.name, on a first verification
	// ControllerInstanceIDLabel assigns a run to the Argo Rollouts
	// controller started with that --instance-id.
	ControllerInstanceIDLabel = "argo-rollouts.argoproj.io/controller-instance-id"
)

// ShortenLabelValue is Kargo's rule for a label value (its
// pkg/kubernetes ShortenLabelValue over pkg/strings HashShorten): a value of
// at most 63 characters stays as it is; a longer one keeps its first 54
// characters, less any trailing dashes, then a dash and the first 8 hex
// digits of the SHA-256 of the whole value.
func ShortenLabelValue(value string) string {
	const maxLen, hashLen = 63, 8
	if len(value) <= maxLen {
		return value
	}
	sum := sha256.Sum256([]byte(value))
	prefix := strings.TrimRight(value[:maxLen-hashLen-1], "-")
	return prefix + "-" + hex.EncodeToString(sum[:])[:hashLen]
}

// Metric is one metric of an AnalysisTemplate: one provider, a success
// condition over its result, and how often to measure.
type Metric struct {
	Name             string
	SuccessCondition string
	// Count is how many measurements to take (1 when 0); Interval the
	// time between them (e.g. "1s"), needed when Count > 1.
	Count    int
	Interval string
	// FailureLimit is how many failed measurements the metric tolerates
	// before it fails (0: the first fails it).
	FailureLimit int
	// Exactly one provider.
	Web        *WebProvider
	Prometheus *PrometheusProvider
}

// WebProvider is Argo Rollouts' web provider: GET URL; JSONPath picks the
// result out of the JSON answer. An answer that is not JSON succeeds
// whatever it says (the provider's rule), so endpoints answer JSON.
type WebProvider struct {
	URL, JSONPath string
}

// PrometheusProvider is Argo Rollouts' prometheus provider: an instant
// query against Address.
type PrometheusProvider struct {
	Address, Query string
}

// WebMetric measures url once and succeeds when its JSON answer's status
// is "ok", as a MetricServer answers while it succeeds.
func WebMetric(name, url string) Metric {
	return Metric{Name: name, SuccessCondition: `result == "ok"`,
		Web: &WebProvider{URL: url, JSONPath: "{$.status}"}}
}

// PrometheusMetric runs query once against the Prometheus at address and
// succeeds on successCondition (e.g. `result[0] >= 1`: the provider's
// result of a vector is the list of its sample values).
func PrometheusMetric(name, address, query, successCondition string) Metric {
	return Metric{Name: name, SuccessCondition: successCondition,
		Prometheus: &PrometheusProvider{Address: address, Query: query}}
}

func (m Metric) object() map[string]any {
	obj := map[string]any{"name": m.Name, "successCondition": m.SuccessCondition, "count": int64(max(m.Count, 1))}
	if m.Interval != "" {
		obj["interval"] = m.Interval
	}
	if m.FailureLimit != 0 {
		obj["failureLimit"] = int64(m.FailureLimit)
	}
	switch {
	case m.Web != nil:
		obj["provider"] = map[string]any{"web": map[string]any{"url": m.Web.URL, "jsonPath": m.Web.JSONPath, "timeoutSeconds": int64(5)}}
	case m.Prometheus != nil:
		obj["provider"] = map[string]any{"prometheus": map[string]any{"address": m.Prometheus.Address, "query": m.Prometheus.Query}}
	}
	return obj
}

// TemplateArg is an argument an AnalysisTemplate declares: with a default
// value, or without one (Value nil), which the run must then be given.
// Metrics use it as {{args.<name>}}.
type TemplateArg struct {
	Name  string
	Value *string
}

// AnalysisTemplate is the spec of an AnalysisTemplate or a
// ClusterAnalysisTemplate.
type AnalysisTemplate struct {
	Metrics []Metric
	Args    []TemplateArg
}

func (t AnalysisTemplate) spec() map[string]any {
	metrics := make([]any, len(t.Metrics))
	for i, m := range t.Metrics {
		metrics[i] = m.object()
	}
	spec := map[string]any{"metrics": metrics}
	if len(t.Args) > 0 {
		args := make([]any, len(t.Args))
		for i, a := range t.Args {
			arg := map[string]any{"name": a.Name}
			if a.Value != nil {
				arg["value"] = *a.Value
			}
			args[i] = arg
		}
		spec["args"] = args
	}
	return spec
}

// CreateAnalysisTemplate creates an AnalysisTemplate in ns, as a project's
// team would for its Stages' verification.
func (k *Kargo) CreateAnalysisTemplate(ctx context.Context, ns, name string, t AnalysisTemplate) (*unstructured.Unstructured, error) {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": rolloutsGroupVersion.String(), "kind": "AnalysisTemplate",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     t.spec(),
	}}
	created, err := k.client.Resource(AnalysisTemplatesResource).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating AnalysisTemplate %s/%s: %w", ns, name, err)
	}
	return created, nil
}

// CreateClusterAnalysisTemplate creates a ClusterAnalysisTemplate.
func (k *Kargo) CreateClusterAnalysisTemplate(ctx context.Context, name string, t AnalysisTemplate) (*unstructured.Unstructured, error) {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": rolloutsGroupVersion.String(), "kind": "ClusterAnalysisTemplate",
		"metadata": map[string]any{"name": name},
		"spec":     t.spec(),
	}}
	created, err := k.client.Resource(ClusterAnalysisTemplatesResource).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating ClusterAnalysisTemplate %s: %w", name, err)
	}
	return created, nil
}

// AnalysisRun reads an AnalysisRun as it is on the server.
func (k *Kargo) AnalysisRun(ctx context.Context, ns, name string) (*unstructured.Unstructured, error) {
	return k.client.Resource(AnalysisRunsResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
}

// AnalysisRuns lists the AnalysisRuns of a Stage's Freight collection as
// Kargo finds them: in ns, by its labels kargo.akuity.io/stage (the
// shortened name) and kargo.akuity.io/freight-collection; newest first
// (by creationTimestamp, then name).
func (k *Kargo) AnalysisRuns(ctx context.Context, ns, stage, collection string) ([]unstructured.Unstructured, error) {
	selector := StageLabel + "=" + ShortenLabelValue(stage) + "," + FreightCollectionLabel + "=" + collection
	list, err := k.client.Resource(AnalysisRunsResource).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("listing AnalysisRuns of Stage %s/%s, collection %s: %w", ns, stage, collection, err)
	}
	runs := list.Items
	newestFirst(runs)
	return runs, nil
}

// AnalysisRunPhase is an AnalysisRun's status.phase: "" until Argo Rollouts
// picked it up, then Pending, Running, Successful, Failed, Error or
// Inconclusive.
func AnalysisRunPhase(run *unstructured.Unstructured) string {
	phase, _, _ := unstructured.NestedString(run.Object, "status", "phase")
	return phase
}

// TerminateAnalysisRun asks Argo Rollouts to stop a run, as Kargo's abort
// does: a merge patch of spec.terminate.
func (k *Kargo) TerminateAnalysisRun(ctx context.Context, ns, name string) error {
	_, err := k.client.Resource(AnalysisRunsResource).Namespace(ns).Patch(ctx, name, types.MergePatchType,
		[]byte(`{"spec":{"terminate":true}}`), metav1.PatchOptions{FieldManager: FieldManager})
	if err != nil {
		return fmt.Errorf("terminating AnalysisRun %s/%s: %w", ns, name, err)
	}
	return nil
}

// newestFirst sorts runs by creationTimestamp, newest first; the name
// (whose ULID grows) breaks ties within a second.
func newestFirst(runs []unstructured.Unstructured) {
	slices.SortStableFunc(runs, func(a, b unstructured.Unstructured) int {
		ta, tb := a.GetCreationTimestamp(), b.GetCreationTimestamp()
		if c := tb.Compare(ta.Time); c != 0 {
			return c
		}
		return strings.Compare(b.GetName(), a.GetName())
	})
}
