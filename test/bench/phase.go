package main

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kargo-latch/kargo-latch/kargo"
)

// churning is Kargo's churn behind a timed phase: health flaps written to
// the busy Stages after the first reserved ones, and Promotions run through
// their lifecycle.
type churning struct {
	stop              func()
	started           time.Time
	churned, promoted atomic.Int64
}

// startChurn starts the churn, and gives it two seconds to get going.
func (b *bench) startChurn(ctx context.Context, reserved int) *churning {
	churnCtx, cancel := context.WithCancel(ctx)
	c := &churning{started: time.Now()}
	go b.churn(churnCtx, b.o.churn, reserved, &c.churned)
	promotionsDone := make(chan struct{})
	go func() {
		defer close(promotionsDone)
		b.churnPromotions(churnCtx, b.o.promotionChurn, reserved, &c.promoted)
	}()
	c.stop = func() { cancel(); <-promotionsDone }
	time.Sleep(2 * time.Second)
	return c
}

// rates are the status writes and Promotions per second achieved so far.
func (c *churning) rates() (writes, promotions float64) {
	s := time.Since(c.started).Seconds()
	return float64(c.churned.Load()) / s, float64(c.promoted.Load()) / s
}

// pings are the baseline's round trips, and each split at the PATCH's
// return: the request, then the watch's delivery.
type pings struct{ total, request, hop []time.Duration }

// pingBaseline is the raw PATCH→watch round trip, n times, on busy Stages
// after the first reserved ones: an annotation patched (tagged, so that
// each phase's values are its own), and the watcher seeing it.
func (b *bench) pingBaseline(ctx context.Context, reserved, n int, tag string) (pings, error) {
	var p pings
	for i := range n {
		s := b.busy[reserved+i%(len(b.busy)-reserved)]
		value := tag + strconv.Itoa(i)
		t0 := time.Now()
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"bench/ping":%q}}}`, value)
		if _, err := b.dyn.Resource(kargo.StagesResource).Namespace(s.Namespace).Patch(ctx, s.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return p, err
		}
		returned := time.Now()
		seen, err := b.watcher.waitPing(ctx, s.Namespace, s.Name, value)
		if err != nil {
			return p, err
		}
		p.total, p.request, p.hop = append(p.total, seen.Sub(t0)), append(p.request, returned.Sub(t0)), append(p.hop, seen.Sub(returned))
	}
	return p, nil
}
