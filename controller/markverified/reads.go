package markverified

import (
	"context"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
)

// Reads are the live reads a mark rests on: the StagePauses covering
// the Stage and the Freight to mark. They are started while the latch is
// being stored, so that a mark costs one round trip after the store (the
// Freight patch) instead of three; they are made no earlier than the
// decision they serve, so they are as fresh as reading them afterwards.
type Reads struct {
	done      chan struct{}
	pauses    []*v1alpha1.StagePause
	pausesErr error
	freights  map[string]freightRead
	dynamic   dynamic.Interface
}

type freightRead struct {
	obj *unstructured.Unstructured
	err error
}

// StartReads starts the reads for a mark of freights in a Stage.
func (mk *Marker) StartReads(ctx context.Context, ns, stage string, freights []string) *Reads {
	r := &Reads{done: make(chan struct{}), freights: make(map[string]freightRead, len(freights)), dynamic: mk.dynamic}
	var wg sync.WaitGroup
	var mu sync.Mutex
	wg.Go(func() { r.pauses, r.pausesErr = mk.livePauses(ctx, ns, stage) })
	for _, name := range freights {
		wg.Go(func() {
			obj, err := mk.dynamic.Resource(kargo.FreightsResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
			mu.Lock()
			r.freights[name] = freightRead{obj, err}
			mu.Unlock()
		})
	}
	go func() { wg.Wait(); close(r.done) }()
	return r
}

// Pauses waits for the reads and returns the StagePauses covering the
// Stage as listed now.
func (r *Reads) Pauses() ([]*v1alpha1.StagePause, error) {
	<-r.done
	return r.pauses, r.pausesErr
}

// Wait waits for the reads to end (a sync must not leave them running).
func (r *Reads) Wait() { <-r.done }

// freight returns the Freight as read, or reads it now if it was not among
// the Freight read ahead.
func (r *Reads) freight(ctx context.Context, ns, name string) (*unstructured.Unstructured, error) {
	<-r.done
	if f, ok := r.freights[name]; ok {
		return f.obj, f.err
	}
	return r.dynamic.Resource(kargo.FreightsResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
}
