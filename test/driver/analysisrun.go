package driver

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kargo-latch/kargo-latch/kargo"
)

// KargoAnalysisRun builds the AnalysisRun Kargo's startVerification would
// create for the current Freight collection (kargo-api-facts.md §12.3),
// simplified where a test does not look:
//   - name <stage>.<ulid>.<collection id>, lower case;
//   - labels: analysisRunMetadata.labels, then kargo.akuity.io/stage (the
//     shortened name) and kargo.akuity.io/freight-collection, then the
//     controller-instance-id label when the driver has one
//     (WithRolloutsControllerInstanceID);
//   - annotations: analysisRunMetadata.annotations, kargo.akuity.io/stage
//     with the full name when shortened, kargo.akuity.io/promotion with
//     status.lastPromotion.name;
//   - owner references to each Freight of the collection;
//   - spec: the templates' metrics, dryRun and measurementRetention
//     concatenated (AnalysisTemplates first, then ClusterAnalysisTemplates,
//     as Kargo combines them), their args merged, and spec.verification.args
//     set over the args the templates declare (Argo Rollouts' MergeArgs).
//     Unlike Kargo it refuses ${{ }} expressions, and does not check for
//     duplicate metric names.
func (s *Stage) KargoAnalysisRun(ctx context.Context) (*unstructured.Unstructured, error) {
	u, err := s.get(ctx)
	if err != nil {
		return nil, err
	}
	history, _, _ := unstructured.NestedSlice(u.Object, "status", "freightHistory")
	if len(history) == 0 {
		return nil, ErrNoFreight
	}
	collection := history[0].(map[string]any)
	id, _ := collection["id"].(string)
	verification, _, _ := unstructured.NestedMap(u.Object, "spec", "verification")
	if verification == nil {
		return nil, fmt.Errorf("stage %s/%s has no spec.verification", s.Namespace, s.Name)
	}
	spec, err := s.k.flattenTemplates(ctx, s.Namespace, verification)
	if err != nil {
		return nil, err
	}
	labels, _, _ := unstructured.NestedStringMap(verification, "analysisRunMetadata", "labels")
	annotations, _, _ := unstructured.NestedStringMap(verification, "analysisRunMetadata", "annotations")
	if labels == nil {
		labels = map[string]string{}
	}
	if annotations == nil {
		annotations = map[string]string{}
	}
	labels[StageLabel] = ShortenLabelValue(s.Name)
	labels[FreightCollectionLabel] = id
	if s.k.rolloutsInstanceID != "" {
		labels[ControllerInstanceIDLabel] = s.k.rolloutsInstanceID
	}
	if labels[StageLabel] != s.Name {
		annotations[StageAnnotation] = s.Name
	}
	if promotion, _, _ := unstructured.NestedString(u.Object, "status", "lastPromotion", "name"); promotion != "" {
		annotations[PromotionAnnotation] = promotion
	}
	run := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": rolloutsGroupVersion.String(), "kind": "AnalysisRun",
		"metadata": map[string]any{
			"name":      strings.ToLower(s.Name + "." + ulidAt(s.k.clock()) + "." + id),
			"namespace": s.Namespace,
		},
		"spec": spec,
	}}
	run.SetLabels(labels)
	if len(annotations) > 0 {
		run.SetAnnotations(annotations)
	}
	var owners []metav1.OwnerReference
	for _, name := range collectionFreight(collection) {
		f, err := s.k.Freight(ctx, s.Namespace, name)
		if err != nil {
			return nil, fmt.Errorf("reading Freight %s/%s, an owner of the run: %w", s.Namespace, name, err)
		}
		no := false
		owners = append(owners, metav1.OwnerReference{APIVersion: kargo.GroupVersion.String(), Kind: "Freight",
			Name: f.GetName(), UID: f.GetUID(), BlockOwnerDeletion: &no})
	}
	run.SetOwnerReferences(owners)
	return run, nil
}

// flattenTemplates reads the templates spec.verification names and merges
// them into one AnalysisRun spec.
func (k *Kargo) flattenTemplates(ctx context.Context, ns string, verification map[string]any) (map[string]any, error) {
	refs, _, _ := unstructured.NestedSlice(verification, "analysisTemplates")
	var namespaced, cluster []map[string]any
	for _, r := range refs {
		ref, _ := r.(map[string]any)
		name, _ := ref["name"].(string)
		var t *unstructured.Unstructured
		var err error
		if ref["kind"] == "ClusterAnalysisTemplate" {
			t, err = k.client.Resource(ClusterAnalysisTemplatesResource).Get(ctx, name, metav1.GetOptions{})
		} else {
			t, err = k.client.Resource(AnalysisTemplatesResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		}
		if err != nil {
			if apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("the verification's template %v does not exist: %w", ref, err)
			}
			return nil, err
		}
		spec, _, _ := unstructured.NestedMap(t.Object, "spec")
		if ref["kind"] == "ClusterAnalysisTemplate" {
			cluster = append(cluster, spec)
		} else {
			namespaced = append(namespaced, spec)
		}
	}
	var metrics, dryRun, retention, args []any
	for _, spec := range append(namespaced, cluster...) {
		m, _, _ := unstructured.NestedSlice(spec, "metrics")
		d, _, _ := unstructured.NestedSlice(spec, "dryRun")
		r, _, _ := unstructured.NestedSlice(spec, "measurementRetention")
		a, _, _ := unstructured.NestedSlice(spec, "args")
		metrics, dryRun, retention = append(metrics, m...), append(dryRun, d...), append(retention, r...)
		for _, arg := range a {
			args = mergeTemplateArg(args, arg.(map[string]any))
		}
	}
	overrides, _, _ := unstructured.NestedSlice(verification, "args")
	for _, o := range overrides {
		override := o.(map[string]any)
		value, _ := override["value"].(string)
		if strings.Contains(value, "${{") {
			return nil, fmt.Errorf("the driver does not evaluate Kargo's expressions (arg %v = %q)", override["name"], value)
		}
		for _, a := range args {
			if arg := a.(map[string]any); arg["name"] == override["name"] {
				arg["value"] = value
				delete(arg, "valueFrom")
			}
		}
	}
	for _, a := range args {
		arg := a.(map[string]any)
		if _, ok := arg["value"]; !ok && arg["valueFrom"] == nil {
			return nil, fmt.Errorf("args.%v was not resolved", arg["name"])
		}
	}
	spec := map[string]any{"metrics": metrics}
	for key, list := range map[string][]any{"dryRun": dryRun, "measurementRetention": retention, "args": args} {
		if len(list) > 0 {
			spec[key] = list
		}
	}
	return spec, nil
}

// mergeTemplateArg adds a template's arg to args: a value fills a
// valueless one of the same name.
func mergeTemplateArg(args []any, arg map[string]any) []any {
	for _, a := range args {
		if have := a.(map[string]any); have["name"] == arg["name"] {
			if _, ok := have["value"]; !ok {
				if v, ok := arg["value"]; ok {
					have["value"] = v
				}
			}
			return args
		}
	}
	return append(args, arg)
}
