package cli

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
)

// source is one watched kind of object: an informer's cache, which the
// informer keeps up to date by a watch, and relists and rewatches by itself
// after a broken connection or an expired resourceVersion. Every change
// signals the channel the source was given.
type source struct {
	informer cache.SharedIndexInformer
	cancel   context.CancelFunc
}

// sourceSpec says what a source watches.
type sourceSpec struct {
	client dynamic.Interface
	gvr    schema.GroupVersionResource
	// ns is the namespace; all namespaces when empty.
	ns string
	// tweak sets the list options (selectors); nil for none.
	tweak   func(*metav1.ListOptions)
	changed chan<- struct{}
	// heard, when set, hears the outcome of every list and watch request
	// the informer makes: the informer retries a refused connection for
	// ever by itself, without a word, so a wait counts how long the API
	// server has not answered (reachability). The informer then logs no
	// errors of its own.
	heard func(error)
}

// watchSource starts watching as spec says, and returns once the cache
// holds what the API server has. It first lists once, so that a missing
// right is an error now, not a watch that retries forever.
func watchSource(ctx context.Context, spec sourceSpec) (*source, error) {
	err := spec.readOnce(ctx)
	spec.hear(err)
	if err != nil {
		return nil, err
	}
	s, err := spec.start(ctx)
	if err != nil {
		return nil, err
	}
	if !cache.WaitForCacheSync(ctx.Done(), s.informer.HasSynced) {
		s.stop()
		return nil, fmt.Errorf("watching %s: %w", spec.gvr.Resource, context.Cause(ctx))
	}
	return s, nil
}

// start starts watching as spec says, without waiting: until the cache
// holds what the API server has, the source shows less.
func (spec sourceSpec) start(ctx context.Context) (*source, error) {
	r := spec.client.Resource(spec.gvr).Namespace(spec.ns)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			spec.tweakOptions(&o)
			l, err := r.List(ctx, o)
			spec.hear(err)
			return l, err
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			spec.tweakOptions(&o)
			w, err := r.Watch(ctx, o)
			spec.hear(err)
			return w, err
		},
	}
	informer := cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, spec.client),
		&unstructured.Unstructured{}, cache.SharedIndexInformerOptions{ObjectDescription: spec.gvr.String()})
	notify := func() {
		select {
		case spec.changed <- struct{}{}:
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
	if spec.heard != nil {
		// Whoever hears the requests reports them.
		if err := informer.SetWatchErrorHandlerWithContext(func(context.Context, *cache.Reflector, error) {}); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	go informer.RunWithContext(ctx)
	return &source{informer: informer, cancel: cancel}, nil
}

// readOnce lists what the source watches, one object at most: whether it
// may be read.
func (spec sourceSpec) readOnce(ctx context.Context) error {
	probe := metav1.ListOptions{Limit: 1}
	spec.tweakOptions(&probe)
	_, err := spec.client.Resource(spec.gvr).Namespace(spec.ns).List(ctx, probe)
	return err
}

func (spec sourceSpec) tweakOptions(o *metav1.ListOptions) {
	if spec.tweak != nil {
		spec.tweak(o)
	}
}

func (spec sourceSpec) hear(err error) {
	if spec.heard != nil {
		spec.heard(err)
	}
}

// stop ends the source's watch.
func (s *source) stop() {
	if s != nil {
		s.cancel()
	}
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
