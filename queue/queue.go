// Package queue is kargo-latch's typed, rate-limited workqueue of object
// names, and the worker loop that drains it.
package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// Queue holds the names of objects that need a sync.
type Queue = workqueue.TypedRateLimitingInterface[cache.ObjectName]

// Backoff of a key whose sync fails: from a few milliseconds (a conflict
// with Kargo's own write usually clears at once) up to 30 seconds, so that a
// Stage is looked at again soon after an API server outage; and at most 50
// retries a second overall, so that an outage is not hammered.
const (
	baseRetryDelay = 5 * time.Millisecond
	maxRetryDelay  = 30 * time.Second
)

// New returns a named queue. The name labels the queue's metrics; mp may be
// nil for none, and clk is the clock delays are measured with.
func New(name string, mp workqueue.MetricsProvider, clk clock.WithTicker) Queue {
	return newQueue(name, mp, clk, nil)
}

// NewWithLanes is New with its waiting keys kept in Lanes, through which
// keys can be marked urgent.
func NewWithLanes(name string, mp workqueue.MetricsProvider, clk clock.WithTicker) (Queue, *Lanes) {
	lanes := NewLanes(clk)
	return newQueue(name, mp, clk, lanes), lanes
}

func newQueue(name string, mp workqueue.MetricsProvider, clk clock.WithTicker, store workqueue.Queue[cache.ObjectName]) Queue {
	limiter := workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](baseRetryDelay, maxRetryDelay),
		&workqueue.TypedBucketRateLimiter[cache.ObjectName]{Limiter: rate.NewLimiter(rate.Limit(50), 300)},
	)
	// client-go's own construction, with store (nil: its FIFO) as the
	// store of waiting keys.
	delaying := workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[cache.ObjectName]{
		Name:            name,
		MetricsProvider: mp,
		Clock:           clk,
		Queue: workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[cache.ObjectName]{
			Name:            name,
			MetricsProvider: mp,
			Clock:           clk,
			Queue:           store,
		}),
	})
	return workqueue.NewTypedRateLimitingQueueWithConfig(limiter, workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{
		Name:            name,
		MetricsProvider: mp,
		Clock:           clk,
		DelayingQueue:   delaying,
	})
}

// SyncFunc brings one object to its wanted state. A positive requeueAfter
// asks for another sync after that long even if nothing changes.
type SyncFunc func(ctx context.Context, key cache.ObjectName) (requeueAfter time.Duration, err error)

// ErrDropped marks the error of a key's last sync before it is dropped:
// whatever the error, work was given up, which a retry alone (a write
// conflict, say) is not.
var ErrDropped = errors.New("dropped")

// Worker drains a Queue with a SyncFunc.
type Worker struct {
	Queue Queue
	Sync  SyncFunc
	// MaxRetries is how often a failing key is retried before it is
	// dropped; it comes back with its next event, or after
	// RetryDroppedAfter.
	MaxRetries int
	// RetryDroppedAfter, if positive, tries a dropped key again after that
	// long, so that a key is never given up for good.
	RetryDroppedAfter time.Duration
	// OnError, if set, is told of every failed sync (for metrics).
	OnError func(key cache.ObjectName, err error)
	// Lanes, if set, are the Queue's (NewWithLanes): a key handed out as
	// urgent is synced with its mark's time in the context (UrgentSince),
	// and a requeue after a sync is urgent once it falls due: it is a
	// time-based transition (a grace or a deadline that ends).
	Lanes *Lanes
}

type urgentKey struct{}

// UrgentSince reports when the key a sync's context belongs to became
// urgent (marked, or due), if it was handed out as urgent.
func UrgentSince(ctx context.Context) (time.Time, bool) {
	at, ok := ctx.Value(urgentKey{}).(time.Time)
	return at, ok
}

// Run starts n workers and blocks until ctx is done, then shuts the queue
// down and waits for the workers to finish their current keys. Keys still
// queued then are left: a queue lives for one leadership term, and the next
// term starts from every cached object.
func (w *Worker) Run(ctx context.Context, n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for w.processNext(ctx) {
			}
		})
	}
	<-ctx.Done()
	w.Queue.ShutDown()
	wg.Wait()
}

func (w *Worker) processNext(ctx context.Context) bool {
	key, shutdown := w.Queue.Get()
	if shutdown {
		return false
	}
	defer w.Queue.Done(key)
	// A shut-down queue still hands out what it holds; a worker that is
	// told to stop must not start another sync (its writes would race the
	// next leader's).
	if ctx.Err() != nil {
		return false
	}

	urgent := false
	if w.Lanes != nil {
		var since time.Time
		if since, urgent = w.Lanes.Take(key); urgent {
			ctx = context.WithValue(ctx, urgentKey{}, since)
		}
	}
	after, err := w.syncSafely(ctx, key)
	switch {
	case ctx.Err() != nil:
		// Stopped mid-sync: the error, if any, is the cancellation's, not
		// the key's.
		return false
	case err == nil:
		w.Queue.Forget(key)
		if after > 0 {
			if w.Lanes != nil {
				w.Lanes.MarkDueIn(key, after)
			}
			w.Queue.AddAfter(key, after)
		}
	case w.Queue.NumRequeues(key) < w.MaxRetries:
		w.report(key, err)
		if urgent {
			w.Lanes.Remark(key) // its retry keeps its place
		}
		w.Queue.AddRateLimited(key)
	default:
		w.report(key, fmt.Errorf("%w after %d retries: %w", ErrDropped, w.MaxRetries, err))
		w.Queue.Forget(key)
		utilruntime.HandleErrorWithContext(ctx, err, "Dropping key after retries", "key", key, "retries", w.MaxRetries, "retryAfter", w.RetryDroppedAfter)
		if w.RetryDroppedAfter > 0 {
			w.Queue.AddAfter(key, w.RetryDroppedAfter)
		}
	}
	return true
}

func (w *Worker) report(key cache.ObjectName, err error) {
	if w.OnError != nil {
		w.OnError(key, err)
	}
}

// syncSafely turns a panic in a sync into an error, so that one odd object
// cannot take the operator down with every other Stage.
func (w *Worker) syncSafely(ctx context.Context, key cache.ObjectName) (after time.Duration, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic syncing %s: %v", key, r)
			klog.FromContext(ctx).Error(err, "Recovered from panic", "key", key)
		}
	}()
	return w.Sync(ctx, key)
}
