package cluster

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// Kustomize builds a kustomization directory, as `kubectl kustomize` does,
// and returns its objects in kustomize's order (namespaces and CRDs first).
func Kustomize(dir string) ([]*unstructured.Unstructured, error) {
	opts := krusty.MakeDefaultOptions()
	// Overlays made by tests live outside the repository and point into it.
	opts.LoadRestrictions = types.LoadRestrictionsNone
	resMap, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range resMap.Resources() {
		b, err := r.MarshalJSON()
		if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(b); err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, nil
}
