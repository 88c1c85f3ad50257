package controller

import (
	"context"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
)

// markReads are the live reads a mark rests on: the StagePauses covering
// the Stage and the Freight to mark. They are started while the latch is
// being stored, so that a mark costs one round trip after the store (the
// Freight patch) instead of three; they are made no earlier than the
// decision they serve, so they are as fresh as reading them afterwards.
type markReads struct {
	done      chan struct{}
	pauses    []*v1alpha1.StagePause
	pausesErr error
	freights  map[string]freightRead
}

type freightRead struct {
	obj *unstructured.Unstructured
	err error
}

// startMarkReads starts the reads for a mark of freights in a Stage.
func (c *Controller) startMarkReads(ctx context.Context, ns, stage string, freights []string) *markReads {
	r := &markReads{done: make(chan struct{}), freights: make(map[string]freightRead, len(freights))}
	var wg sync.WaitGroup
	var mu sync.Mutex
	wg.Go(func() { r.pauses, r.pausesErr = c.livePauses(ctx, ns, stage) })
	for _, name := range freights {
		wg.Go(func() {
			obj, err := c.cfg.Dynamic.Resource(kargo.FreightsResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
			mu.Lock()
			r.freights[name] = freightRead{obj, err}
			mu.Unlock()
		})
	}
	go func() { wg.Wait(); close(r.done) }()
	return r
}

// freight returns the Freight as read, or reads it now if it was not among
// the Freight read ahead.
func (c *Controller) freight(ctx context.Context, r *markReads, ns, name string) (*unstructured.Unstructured, error) {
	if f, ok := r.freights[name]; ok {
		return f.obj, f.err
	}
	return c.cfg.Dynamic.Resource(kargo.FreightsResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
}
