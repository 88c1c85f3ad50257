package verification

import (
	"errors"
	"fmt"
	"maps"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Reasons of an *Unsupported error.
const (
	ReasonNotConfigured = "NotConfigured"    // no spec.verification, or no current Freight collection
	ReasonTemplate      = "TemplateMissing"  // a referenced template was not given
	ReasonUnknownField  = "UnknownField"     // a template field Kargo's types lack, or not known to carry
	ReasonMerge         = "MergeConflict"    // duplicate metric, conflicting or unresolved args
	ReasonExpression    = "ExpressionFailed" // an arg or var Kargo would fail to evaluate, or a non-string arg
	ReasonFunction      = "UnsupportedFunction"
	ReasonFreight       = "FreightMissing" // a Freight of the collection was not given
)

// Unsupported says why no run was built: Kargo would fail too, or
// kargo-latch cannot build it exactly as Kargo would.
type Unsupported struct{ Reason, Message string }

// Error returns the message.
func (u *Unsupported) Error() string { return u.Message }

func unsupported(reason, format string, a ...any) *Unsupported {
	return &Unsupported{Reason: reason, Message: fmt.Sprintf(format, a...)}
}

// Input is everything one run is built from.
type Input struct {
	Source *Source
	// Templates holds the fetched template of each Source.Templates entry.
	Templates map[TemplateRef]*unstructured.Unstructured
	// Freight holds the collection's Freight objects, for owner references.
	Freight []*unstructured.Unstructured
	// Warehouses holds the Warehouses of Source.RequestedFreight by name. Only
	// commitFrom/imageFrom/chartFrom without an origin read them (as Kargo
	// does); a missing one then fails the expression.
	Warehouses map[string]*unstructured.Unstructured
	// Name is the run's name (RunName).
	Name string
	// InstanceID is Kargo's ROLLOUTS_CONTROLLER_INSTANCE_ID: when set, the
	// run carries it as the controller-instance-id label.
	InstanceID string
}

// Build returns the AnalysisRun Kargo would create for the Source's current
// Freight collection, named in.Name and marked with MarkerLabel, or an
// *Unsupported error.
func Build(in Input) (*unstructured.Unstructured, error) {
	src := in.Source
	switch {
	case src == nil || !src.Configured:
		return nil, unsupported(ReasonNotConfigured, "the Stage has no spec.verification")
	case src.Collection.ID == "":
		return nil, unsupported(ReasonNotConfigured, "the Stage has no current Freight collection")
	case in.Name == "":
		return nil, errors.New("no run name")
	}
	specs, err := templateSpecs(src, in.Templates)
	if err != nil {
		return nil, err
	}
	flat, err := flatten(specs)
	if err != nil {
		return nil, err
	}
	stageArgs, err := evaluateArgs(src, in.Warehouses)
	if err != nil {
		return nil, err
	}
	args, err := mergeArgs(flat.args, stageArgs)
	if err != nil {
		return nil, err
	}
	owners, err := ownerReferences(src.Collection, in.Freight)
	if err != nil {
		return nil, err
	}
	spec := map[string]any{"metrics": toAny(flat.metrics)}
	if len(args) > 0 {
		spec["args"] = args
	}
	if len(flat.dryRun) > 0 {
		spec["dryRun"] = toAny(flat.dryRun)
	}
	if len(flat.retention) > 0 {
		spec["measurementRetention"] = toAny(flat.retention)
	}
	labels, annotations := metadata(src, in.InstanceID)
	meta := map[string]any{
		"name":            in.Name,
		"namespace":       src.Project,
		"labels":          labels,
		"ownerReferences": owners,
	}
	if len(annotations) > 0 {
		meta["annotations"] = annotations
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1",
		"kind":       "AnalysisRun",
		"metadata":   meta,
		"spec":       spec,
	}}, nil
}

// templateSpecs takes the templates in Kargo's combined order: every
// AnalysisTemplate in list order, then every ClusterAnalysisTemplate.
func templateSpecs(src *Source, given map[TemplateRef]*unstructured.Unstructured) ([]templateSpec, error) {
	var specs []templateSpec
	for _, kind := range []string{KindAnalysisTemplate, KindClusterAnalysisTemplate} {
		for _, ref := range src.Templates {
			if ref.Kind != kind {
				continue
			}
			t := given[ref]
			if t == nil {
				return nil, unsupported(ReasonTemplate, "%s %q not found", ref.Kind, ref.Name)
			}
			s, err := readTemplateSpec(fmt.Sprintf("%s %q", ref.Kind, ref.Name), t.Object)
			if err != nil {
				return nil, err
			}
			specs = append(specs, s)
		}
	}
	return specs, nil
}

// evaluateArgs is the expression half of Kargo's buildArgs: the env holds ctx
// {project, stage} and, when the Stage has vars, vars: each var evaluated in
// order into it (so it sees the earlier ones) before any argument; then each
// argument with a non-empty value is evaluated and must give a string.
func evaluateArgs(src *Source, warehouses map[string]*unstructured.Unstructured) ([]evaluatedArg, error) {
	env := map[string]any{"ctx": map[string]any{"project": src.Project, "stage": src.Stage}}
	fns := &freightFunctions{project: src.Project, requested: src.RequestedFreight,
		freight: src.Collection.Freight, warehouses: warehouses}
	ev := newEvaluator(env, fns.options())
	if len(src.Vars) > 0 {
		vars := map[string]any{}
		env["vars"] = vars
		for _, v := range src.Vars {
			val, err := ev.evaluate(v.Value)
			if err != nil {
				return nil, expressionError(fmt.Sprintf("evaluate variable %q", v.Name), err)
			}
			if s, ok := val.(string); ok && strings.Contains(s, printedMarker) {
				return nil, unsupported(ReasonFunction, "variable %q prints a Freight value, whose text depends on Kargo's version", v.Name)
			}
			vars[v.Name] = val
		}
	}
	out := make([]evaluatedArg, 0, len(src.Args))
	for _, a := range src.Args {
		e := evaluatedArg{name: a.Name}
		if a.Value != "" {
			val, err := ev.evaluate(a.Value)
			if err != nil {
				return nil, expressionError(fmt.Sprintf("evaluate argument %q", a.Name), err)
			}
			s, ok := val.(string)
			if !ok {
				return nil, unsupported(ReasonExpression, "evaluated argument %q value is not a string but %T", a.Name, val)
			}
			if strings.Contains(s, printedMarker) {
				return nil, unsupported(ReasonFunction, "argument %q prints a Freight value, whose text depends on Kargo's version", a.Name)
			}
			e.value, e.hasValue = s, true
		}
		out = append(out, e)
	}
	return out, nil
}

func expressionError(what string, err error) *Unsupported {
	var fn errUnsupportedFunction
	if errors.As(err, &fn) || strings.Contains(err.Error(), "is not supported by kargo-latch") {
		return unsupported(ReasonFunction, "%s: %v", what, err)
	}
	return unsupported(ReasonExpression, "%s: %v", what, err)
}

// ownerReferences names each Freight of the collection (by name; Kargo's
// order follows a map and is random) with the object's own apiVersion, kind
// and uid, blockOwnerDeletion false and no controller flag.
func ownerReferences(c Collection, freight []*unstructured.Unstructured) ([]any, error) {
	byName := map[string]*unstructured.Unstructured{}
	for _, f := range freight {
		if f != nil {
			byName[f.GetName()] = f
		}
	}
	refs := make([]any, 0, len(c.Freight))
	for _, ref := range c.Freight {
		f := byName[ref.Name]
		if f == nil || f.GetUID() == "" {
			return nil, unsupported(ReasonFreight, "Freight %q of collection %q not found", ref.Name, c.ID)
		}
		apiVersion, kind := f.GetAPIVersion(), f.GetKind()
		if apiVersion == "" {
			apiVersion = "kargo.akuity.io/v1alpha1"
		}
		if kind == "" {
			kind = "Freight"
		}
		refs = append(refs, map[string]any{
			"apiVersion":         apiVersion,
			"kind":               kind,
			"name":               f.GetName(),
			"uid":                string(f.GetUID()),
			"blockOwnerDeletion": false,
		})
	}
	return refs, nil
}

// metadata is Kargo's buildMetadata plus kargo-latch's marker label.
func metadata(src *Source, instanceID string) (labels, annotations map[string]any) {
	l := maps.Clone(src.Labels)
	if l == nil {
		l = map[string]string{}
	}
	a := maps.Clone(src.Annotations)
	if a == nil {
		a = map[string]string{}
	}
	short := ShortenLabelValue(src.Stage)
	l[StageLabel] = short
	l[FreightCollectionLabel] = src.Collection.ID
	if short != src.Stage {
		a[StageAnnotation] = src.Stage
	}
	if src.Collection.Verifications == 0 && src.LastPromotion != "" {
		a[PromotionAnnotation] = src.LastPromotion
	}
	if instanceID != "" {
		l[InstanceIDLabel] = instanceID
	}
	l[MarkerLabel] = MarkerValue
	return stringMap(l), stringMap(a)
}

func stringMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func toAny(ms []map[string]any) []any {
	out := make([]any, len(ms))
	for i, m := range ms {
		out[i] = m
	}
	return out
}
