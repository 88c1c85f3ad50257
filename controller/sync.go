package controller

import (
	"context"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kargo-latch/kargo-latch/queue"
)

// syncStage judges one Stage and carries out the judgement: read, judge,
// act. The plan's order is what survives a crash at any point:
//
//  1. a failure's pause, which must not be lost, is made first,
//     idempotently (its name derives from the failure);
//  2. then the Stage's record, paused label and refresh request are stored
//     in one patch, conditional on the resourceVersion they were computed
//     from, so a stale or outdated view is retried rather than stored; the
//     StagePaused Event, the drain and the reads of a mark run beside it;
//  3. then the remaining Events and metrics are reported;
//  4. then held pauses are released, their resume now durable;
//  5. then the Freight of the latch is marked verified, judged again on the
//     stored view, and the marks stored.
//
// Nothing is written when nothing changed.
func (c *Controller) syncStage(ctx context.Context, key cache.ObjectName) (time.Duration, error) {
	start := c.clock.Now()
	defer func() { c.cfg.Metrics.ReconcileDuration.Observe(c.clock.Since(start).Seconds()) }()
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "stage", klog.KRef(key.Namespace, key.Name))
	if since, urgent := queue.UrgentSince(ctx); urgent {
		// Its lines tell when the failure was seen (or the transition
		// fell due) and how long it waited, so that a failure's reaction
		// can be traced to its steps (docs/performance.md).
		waited := start.Sub(since)
		c.cfg.Metrics.UrgentWait.Observe(waited.Seconds())
		logger = klog.LoggerWithValues(logger, "urgentSince", since.UTC().Format(time.RFC3339Nano), "queued", waited)
	}
	ctx = klog.NewContext(ctx, logger)

	// Read: the Stage, its record and pauses as the caches show them.
	snap, err := c.read(ctx, key)
	if snap == nil || err != nil {
		return 0, err
	}
	// Judge: what to do, as a plan.
	p := judge(snap)
	// Act: carry the plan out.
	return c.execute(ctx, snap, p)
}
