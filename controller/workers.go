package controller

import (
	"context"
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kargo-latch/kargo-latch/queue"
)

// The work of a leadership term: its queues, its workers, and how a Stage
// or a StagePause gets into them. Only the leader has queues; a standby
// keeps its caches warm and queues nothing.

// workQueues are the queues of one leadership term.
type workQueues struct {
	stages queue.Queue // Stages to sync
	// urgent are the stages queue's lanes: a Stage whose update shows a
	// new failure, or whose transition falls due, goes before the others
	// (handlers.go, queue.Worker).
	urgent *queue.Lanes
	pauses queue.Queue // StagePauses whose status needs a look
}

// maxRetries bounds the retries of a failing Stage before its key is
// dropped (after about 100 s of backoff), to be tried again after
// droppedRetryAfter or at its next event. That is shorter than the 5m rate
// window of KargoLatchReconcileErrors, so that a Stage that keeps failing
// keeps the alert's expression true until it fires.
const (
	maxRetries        = 15
	droppedRetryAfter = 2 * time.Minute
)

// RunWorkers syncs Stages and StagePauses until ctx is done. Only the
// leader runs it, once per leadership term: each term starts with fresh
// queues holding every cached object, so nothing a previous term left
// undone, nor any event that arrived while standing by, is missed.
func (c *Controller) RunWorkers(ctx context.Context) {
	klog.FromContext(ctx).Info("Starting workers", "workers", c.cfg.Workers, "dryRun", c.cfg.DryRun)
	stages, urgent := queue.NewWithLanes("stages", c.cfg.QueueMetrics, c.cfg.Clock)
	w := &workQueues{stages: stages, urgent: urgent, pauses: queue.New("stagepauses", c.cfg.QueueMetrics, c.cfg.Clock)}
	c.memos.newTerm()
	c.work.Store(w)
	defer c.work.CompareAndSwap(w, nil)
	for _, infs := range c.stageInformers {
		for _, inf := range infs {
			for _, key := range inf.GetIndexer().ListKeys() {
				if name, err := cache.ParseObjectName(key); err == nil {
					w.stages.Add(name)
				}
			}
		}
	}
	for _, inf := range c.pauseInformers {
		for _, key := range inf.GetIndexer().ListKeys() {
			if name, err := cache.ParseObjectName(key); err == nil {
				w.pauses.Add(name)
			}
		}
	}
	pauseWorker := &queue.Worker{Queue: w.pauses, Sync: c.pauseStatus.Sync, MaxRetries: maxRetries, RetryDroppedAfter: droppedRetryAfter, OnError: c.syncFailed(ctx, "stagePause")}
	stageWorker := &queue.Worker{Queue: w.stages, Lanes: w.urgent, Sync: c.syncStage, MaxRetries: maxRetries, RetryDroppedAfter: droppedRetryAfter, OnError: c.syncFailed(ctx, "stage")}
	done := make(chan struct{})
	go func() { defer close(done); pauseWorker.Run(ctx, 1) }()
	stageWorker.Run(ctx, c.cfg.Workers)
	<-done
}

// syncFailed reports a failed sync of an object of the kind named. A write
// conflict is a retry, not an error: the Stage's record is stored
// conditionally on the resourceVersion it was computed from, and Kargo's
// status writes make that conflict by design; the retry computes it again
// from the fresh Stage. Anything else is an error, logged as it happens,
// and so is a key dropped after its retries, whatever its last error.
func (c *Controller) syncFailed(ctx context.Context, kind string) func(cache.ObjectName, error) {
	logger := klog.FromContext(ctx)
	return func(key cache.ObjectName, err error) {
		if apierrors.IsConflict(err) && !errors.Is(err, queue.ErrDropped) {
			c.cfg.Metrics.WriteConflicts.Inc()
			logger.V(4).Info("Write conflicted; retrying from fresh data", kind, klog.KRef(key.Namespace, key.Name), "err", err)
			return
		}
		c.cfg.Metrics.ReconcileErrors.Inc()
		logger.Error(err, "Sync failed", kind, klog.KRef(key.Namespace, key.Name))
	}
}

// enqueue adds a Stage to the current term's queue, if this replica leads.
func (c *Controller) enqueue(key cache.ObjectName) {
	if w := c.work.Load(); w != nil {
		w.stages.Add(key)
	}
}

// enqueueUrgent adds a Stage to the current term's queue, if this replica
// leads, ahead of every Stage not marked urgent.
func (c *Controller) enqueueUrgent(key cache.ObjectName) {
	if w := c.work.Load(); w != nil {
		w.urgent.Mark(key)
		w.stages.Add(key)
	}
}

// enqueuePauseStatus adds a StagePause to the current term's status queue.
func (c *Controller) enqueuePauseStatus(key cache.ObjectName) {
	if w := c.work.Load(); w != nil {
		w.pauses.Add(key)
	}
}
