package verification

import (
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Kargo's label and annotation keys (api/v1alpha1 labels.go/annotations.go),
// and Argo Rollouts' controller-instance-id label (pkg/rollouts).
const (
	StageLabel             = "kargo.akuity.io/stage"
	FreightCollectionLabel = "kargo.akuity.io/freight-collection"
	StageAnnotation        = "kargo.akuity.io/stage"
	PromotionAnnotation    = "kargo.akuity.io/promotion"
	InstanceIDLabel        = "argo-rollouts.argoproj.io/controller-instance-id"

	// MarkerLabel says that kargo-latch, not Kargo, created the run.
	MarkerLabel = "kargo-latch.io/started-by"
	MarkerValue = "kargo-latch"
)

// Kinds of spec.verification.analysisTemplates entries.
const (
	KindAnalysisTemplate        = "AnalysisTemplate"
	KindClusterAnalysisTemplate = "ClusterAnalysisTemplate"
)

// TemplateRef names one spec.verification.analysisTemplates entry. Kind is
// always KindAnalysisTemplate (in the project namespace) or
// KindClusterAnalysisTemplate: Kargo reads any other kind, the empty one
// included, as AnalysisTemplate.
type TemplateRef struct{ Kind, Name string }

// Arg is one spec.verification.args entry: Value is an expression template.
type Arg struct{ Name, Value string }

// Var is one Stage spec.vars entry.
type Var struct{ Name, Value string }

// Origin is a Freight origin (kind Warehouse and a name).
type Origin struct{ Kind, Name string }

// FreightRef is one item of status.freightHistory[0].items.
type FreightRef struct {
	Name    string
	Origin  Origin
	Commits []GitCommit
	Images  []Image
	Charts  []Chart
}

// Collection is status.freightHistory[0]: the Stage's current Freight.
type Collection struct {
	ID      string
	Freight []FreightRef // sorted by name
	// Verifications is the length of its verificationHistory.
	Verifications int
}

// Source is what a Stage gives the run: its spec.verification, spec.vars,
// spec.requestedFreight and current Freight collection. It is parsed from the
// live Stage object because kargo-latch's own Stage mirror keeps none of it.
type Source struct {
	Project, Stage string
	// Configured is false when the Stage has no spec.verification.
	Configured  bool
	Templates   []TemplateRef
	Args        []Arg
	Labels      map[string]string
	Annotations map[string]string
	Vars        []Var
	// RequestedFreight lists the origins of spec.requestedFreight, in order:
	// the Warehouses to pass in Input.Warehouses.
	RequestedFreight []Origin
	Collection       Collection
	// LastPromotion is status.lastPromotion.name (status.lastPromotionRequest.name
	// on a target-aware Stage), the kargo.akuity.io/promotion annotation.
	LastPromotion string
}

// ParseStage reads a Source from a Stage. A Stage without spec.verification
// gives Configured false and no error; a malformed one an error.
func ParseStage(stage *unstructured.Unstructured) (*Source, error) {
	if stage == nil {
		return nil, fmt.Errorf("no Stage")
	}
	obj := stage.Object
	src := &Source{Project: stage.GetNamespace(), Stage: stage.GetName()}
	v, found, err := unstructured.NestedMap(obj, "spec", "verification")
	if err != nil {
		return nil, fmt.Errorf("spec.verification: %w", err)
	}
	if found && v != nil {
		src.Configured = true
		if err := parseVerification(v, src); err != nil {
			return nil, err
		}
	}
	vars, err := nestedMaps(obj, "spec", "vars")
	if err != nil {
		return nil, err
	}
	for _, v := range vars {
		src.Vars = append(src.Vars, Var{Name: str(v, "name"), Value: str(v, "value")})
	}
	reqs, err := nestedMaps(obj, "spec", "requestedFreight")
	if err != nil {
		return nil, err
	}
	for _, r := range reqs {
		o, _ := r["origin"].(map[string]any)
		src.RequestedFreight = append(src.RequestedFreight, Origin{Kind: str(o, "kind"), Name: str(o, "name")})
	}
	if src.Collection, err = parseCollection(obj); err != nil {
		return nil, err
	}
	// Kargo's getLastPromoObject: target-aware Stages (spec.targets) name their
	// last PromotionRequest, the others their last Promotion.
	last := "lastPromotion"
	if targets, _, _ := unstructured.NestedSlice(obj, "spec", "targets"); len(targets) > 0 {
		last = "lastPromotionRequest"
	}
	src.LastPromotion, _, _ = unstructured.NestedString(obj, "status", last, "name")
	return src, nil
}

func parseVerification(v map[string]any, src *Source) error {
	refs, err := nestedMaps(v, "analysisTemplates")
	if err != nil {
		return err
	}
	for _, r := range refs {
		kind := KindAnalysisTemplate
		if str(r, "kind") == KindClusterAnalysisTemplate {
			kind = KindClusterAnalysisTemplate
		}
		src.Templates = append(src.Templates, TemplateRef{Kind: kind, Name: str(r, "name")})
	}
	args, err := nestedMaps(v, "args")
	if err != nil {
		return err
	}
	for _, a := range args {
		src.Args = append(src.Args, Arg{Name: str(a, "name"), Value: str(a, "value")})
	}
	if src.Labels, _, err = unstructured.NestedStringMap(v, "analysisRunMetadata", "labels"); err != nil {
		return fmt.Errorf("spec.verification.analysisRunMetadata.labels: %w", err)
	}
	if src.Annotations, _, err = unstructured.NestedStringMap(v, "analysisRunMetadata", "annotations"); err != nil {
		return fmt.Errorf("spec.verification.analysisRunMetadata.annotations: %w", err)
	}
	return nil
}

func parseCollection(obj map[string]any) (Collection, error) {
	history, err := nestedMaps(obj, "status", "freightHistory")
	if err != nil || len(history) == 0 {
		return Collection{}, err
	}
	cur := history[0]
	c := Collection{ID: str(cur, "id")}
	if vh, ok := cur["verificationHistory"].([]any); ok {
		c.Verifications = len(vh)
	}
	items, _ := cur["items"].(map[string]any)
	for _, it := range items {
		m, ok := it.(map[string]any)
		if !ok {
			return Collection{}, fmt.Errorf("status.freightHistory[0].items: an item is not an object")
		}
		c.Freight = append(c.Freight, parseFreightRef(m))
	}
	sort.Slice(c.Freight, func(i, j int) bool { return c.Freight[i].Name < c.Freight[j].Name })
	return c, nil
}

func parseFreightRef(m map[string]any) FreightRef {
	o, _ := m["origin"].(map[string]any)
	f := FreightRef{Name: str(m, "name"), Origin: Origin{Kind: str(o, "kind"), Name: str(o, "name")}}
	for _, c := range objects(m["commits"]) {
		f.Commits = append(f.Commits, GitCommit{
			RepoURL: str(c, "repoURL"), ID: str(c, "id"), Branch: str(c, "branch"), Tag: str(c, "tag"),
			Message: str(c, "message"), Author: str(c, "author"), Committer: str(c, "committer"),
		})
	}
	for _, i := range objects(m["images"]) {
		img := Image{RepoURL: str(i, "repoURL"), Tag: str(i, "tag"), Digest: str(i, "digest")}
		if a, ok := i["annotations"].(map[string]any); ok {
			img.Annotations = map[string]string{}
			for k, v := range a {
				img.Annotations[k], _ = v.(string)
			}
		}
		f.Images = append(f.Images, img)
	}
	for _, c := range objects(m["charts"]) {
		f.Charts = append(f.Charts, Chart{RepoURL: str(c, "repoURL"), Name: str(c, "name"), Version: str(c, "version")})
	}
	return f
}

func nestedMaps(obj map[string]any, fields ...string) ([]map[string]any, error) {
	s, _, err := unstructured.NestedSlice(obj, fields...)
	if err != nil {
		return nil, fmt.Errorf("%v: %w", fields, err)
	}
	out := objects(s)
	if len(out) != len(s) {
		return nil, fmt.Errorf("%v: an entry is not an object", fields)
	}
	return out, nil
}

func objects(v any) []map[string]any {
	s, _ := v.([]any)
	out := make([]map[string]any, 0, len(s))
	for _, e := range s {
		if m, ok := e.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

func str(m map[string]any, key string) string {
	s, _ := m[key].(string)
	return s
}
