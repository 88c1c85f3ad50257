package cli

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
)

// source is one watched kind of object: an informer's cache, which the
// informer keeps up to date by a watch, and relists and rewatches by itself
// after a broken connection or an expired resourceVersion. Every change
// signals the channel given to watchSource.
type source struct {
	informer cache.SharedIndexInformer
}

// watchSource starts watching gvr in ns (all namespaces when empty), with
// the list options tweak sets (selectors; nil for none), and returns once
// the cache holds what the API server has. It first lists once, so that a
// missing right is an error now, not a watch that retries forever.
func watchSource(ctx context.Context, client dynamic.Interface, gvr schema.GroupVersionResource, ns string, tweak func(*metav1.ListOptions), changed chan<- struct{}) (*source, error) {
	if tweak == nil {
		tweak = func(*metav1.ListOptions) {}
	}
	probe := metav1.ListOptions{Limit: 1}
	tweak(&probe)
	if _, err := client.Resource(gvr).Namespace(ns).List(ctx, probe); err != nil {
		return nil, err
	}
	informer := dynamicinformer.NewFilteredDynamicInformer(client, gvr, ns, 0, cache.Indexers{}, tweak).Informer()
	notify := func() {
		select {
		case changed <- struct{}{}:
		default: // a change is already signalled; the reader reads the cache anew
		}
	}
	if _, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { notify() },
		UpdateFunc: func(any, any) { notify() },
		DeleteFunc: func(any) { notify() },
	}); err != nil {
		return nil, err
	}
	go informer.RunWithContext(ctx)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return nil, fmt.Errorf("watching %s: %w", gvr.Resource, context.Cause(ctx))
	}
	return &source{informer: informer}, nil
}

// objects is what the cache holds now.
func (s *source) objects() []*unstructured.Unstructured {
	if s == nil {
		return nil
	}
	items := s.informer.GetStore().List()
	out := make([]*unstructured.Unstructured, 0, len(items))
	for _, o := range items {
		if u, ok := o.(*unstructured.Unstructured); ok {
			out = append(out, u)
		}
	}
	return out
}

// byName selects the object named name.
func byName(name string) func(*metav1.ListOptions) {
	return func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
	}
}

// get is the cached object ns/name; nil when there is none, or no source.
func (s *source) get(ns, name string) *unstructured.Unstructured {
	if s == nil {
		return nil
	}
	key := name
	if ns != "" {
		key = ns + "/" + name
	}
	o, ok, err := s.informer.GetStore().GetByKey(key)
	if err != nil || !ok {
		return nil
	}
	u, _ := o.(*unstructured.Unstructured)
	return u
}
