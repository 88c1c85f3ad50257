package cluster

import (
	"context"
	"fmt"
	"os"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"
)

// ReadObjects reads every object of the given multi-document YAML files.
func ReadObjects(files ...string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, doc := range strings.Split(string(b), "\n---") {
			obj := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(doc), &obj.Object); err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			if len(obj.Object) == 0 || obj.GetKind() == "" || obj.GetKind() == "Kustomization" || obj.GetKind() == "Component" {
				continue
			}
			out = append(out, obj)
		}
	}
	return out, nil
}

// Apply creates each object, or replaces it when it exists.
func Apply(ctx context.Context, cfg *rest.Config, objs ...*unstructured.Unstructured) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		gvk := obj.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			mapper.Reset()
			if mapping, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
				return fmt.Errorf("%s %s: %w", gvk.Kind, obj.GetName(), err)
			}
		}
		var r dynamic.ResourceInterface = client.Resource(mapping.Resource)
		if ns := obj.GetNamespace(); ns != "" {
			r = client.Resource(mapping.Resource).Namespace(ns)
		}
		_, err = r.Create(ctx, obj, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			cur, getErr := r.Get(ctx, obj.GetName(), metav1.GetOptions{})
			if getErr != nil {
				return getErr
			}
			obj = obj.DeepCopy()
			obj.SetResourceVersion(cur.GetResourceVersion())
			_, err = r.Update(ctx, obj, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("applying %s %s: %w", gvk.Kind, obj.GetName(), err)
		}
	}
	return nil
}
