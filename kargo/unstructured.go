package kargo

import (
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// TransformStage is a cache.TransformFunc: it turns the unstructured Stages
// of a dynamic informer into *Stage, dropping managedFields, foreign
// annotations and every status field kargo-latch does not read.
var TransformStage = Transform(stageFromMap)

// TransformPromotion is TransformStage for Promotions.
var TransformPromotion = Transform(promotionFromMap)

// StageFromUnstructured converts one Stage outside an informer.
func StageFromUnstructured(u *unstructured.Unstructured) *Stage { return stageFromMap(u.Object) }

// PromotionFromUnstructured converts one Promotion outside an informer.
func PromotionFromUnstructured(u *unstructured.Unstructured) *Promotion {
	return promotionFromMap(u.Object)
}

// Transform makes a cache.TransformFunc that turns a dynamic informer's
// unstructured objects, tombstones included, into the mirror from builds.
func Transform[T any](from func(map[string]any) T) cache.TransformFunc {
	return func(obj any) (any, error) {
		switch o := obj.(type) {
		case *unstructured.Unstructured:
			return from(o.Object), nil
		case cache.DeletedFinalStateUnknown:
			if u, ok := o.Obj.(*unstructured.Unstructured); ok {
				o.Obj = from(u.Object)
			}
			return o, nil
		}
		// Already transformed: transforms may see an object twice.
		return obj, nil
	}
}

// metaFromMap reads the metadata a mirror keeps: the labels and annotations
// keep accepts, each value as value makes it (nil: as it is).
func metaFromMap(obj map[string]any, keep func(string) bool, value func(key, v string) string) metav1.ObjectMeta {
	md, _ := obj["metadata"].(map[string]any)
	m := metav1.ObjectMeta{
		Name:            str(md, "name"),
		Namespace:       str(md, "namespace"),
		UID:             types.UID(str(md, "uid")),
		ResourceVersion: str(md, "resourceVersion"),
		Labels:          stringMap(md, "labels", keep, value),
		Annotations:     stringMap(md, "annotations", keep, value),
	}
	if t := timeAt(md, "creationTimestamp"); t != nil {
		m.CreationTimestamp = metav1.NewTime(*t)
	}
	if t := timeAt(md, "deletionTimestamp"); t != nil {
		dt := metav1.NewTime(*t)
		m.DeletionTimestamp = &dt
	}
	return m
}

// field walks nested maps without copying; nil when any step is missing.
func field(obj map[string]any, path ...string) any {
	var cur any = obj
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

func str(obj map[string]any, path ...string) string {
	s, _ := field(obj, path...).(string)
	return s
}

func timeAt(obj map[string]any, path ...string) *time.Time {
	return parseTime(str(obj, path...))
}

// parseTime reads an RFC 3339 time; nil when empty or unparsable.
func parseTime(s string) *time.Time {
	if s == "" {
		return nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return nil
	}
	return &t
}

func stringMap(obj map[string]any, key string, keep func(string) bool, value func(key, v string) string) map[string]string {
	in, ok := obj[key].(map[string]any)
	if !ok {
		return nil
	}
	var out map[string]string
	for k, v := range in {
		s, ok := v.(string)
		if !ok || !keep(k) {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		if value != nil {
			s = value(k, s)
		}
		out[k] = s
	}
	return out
}
