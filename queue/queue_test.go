package queue

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/kargo-latch/kargo-latch/metrics"
)

type recorder struct {
	mu    sync.Mutex
	calls map[cache.ObjectName]int
	done  chan cache.ObjectName
}

func newRecorder() *recorder {
	return &recorder{calls: map[cache.ObjectName]int{}, done: make(chan cache.ObjectName, 100)}
}

func (r *recorder) count(key cache.ObjectName) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls[key]++
	return r.calls[key]
}

func runWorker(t *testing.T, w *Worker) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { w.Run(ctx, 2); close(stopped) }()
	t.Cleanup(func() { cancel(); <-stopped })
}

func waitFor(t *testing.T, ch chan cache.ObjectName, want cache.ObjectName) {
	t.Helper()
	select {
	case got := <-ch:
		if got != want {
			t.Fatalf("got key %v, want %v", got, want)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("key %v was never handled", want)
	}
}

// idleMoment is how long a queue's work must stay unchanged for it to
// count as idle: longer than the backoff of the retries these tests make.
const idleMoment = 300 * time.Millisecond

// idle waits until queue q, whose metrics reg holds, has nothing queued or
// being worked on, and none of keys waits for a retry (AddRateLimited: a
// key is not in the metrics while its backoff runs), its adds and finished
// work unchanged for idleMoment (as the e2e suite's waitIdle): whatever the
// worker queued again is then done.
func idle(t *testing.T, reg *prometheus.Registry, q Queue, keys ...cache.ObjectName) {
	t.Helper()
	read := func() (in, out float64) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				switch mf.GetName() {
				case "kargo_latch_workqueue_adds_total":
					in += m.GetCounter().GetValue()
				case "kargo_latch_workqueue_work_duration_seconds":
					out += float64(m.GetHistogram().GetSampleCount())
				}
			}
		}
		return in, out
	}
	lastIn, lastOut, since := -1.0, -1.0, time.Now()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		in, out := read()
		if in != out || in != lastIn || out != lastOut || slices.ContainsFunc(keys, func(k cache.ObjectName) bool { return q.NumRequeues(k) > 0 }) {
			lastIn, lastOut, since = in, out, time.Now()
			continue
		}
		if time.Since(since) >= idleMoment {
			return
		}
	}
	t.Fatal("the queue was not idle within 10s")
}

func TestRetriesThenDrops(t *testing.T) {
	rec := newRecorder()
	key := cache.NewObjectName("ns", "flaky")
	var errs []error
	var mu sync.Mutex
	reg := prometheus.NewRegistry()
	w := &Worker{
		Queue:      New("flaky", metrics.NewWorkqueueProvider(reg), clock.RealClock{}),
		MaxRetries: 3,
		Sync: func(_ context.Context, k cache.ObjectName) (time.Duration, error) {
			if rec.count(k) == 4 {
				rec.done <- k
			}
			return 0, errors.New("boom")
		},
		OnError: func(_ cache.ObjectName, err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() },
	}
	runWorker(t, w)
	w.Queue.Add(key)
	waitFor(t, rec.done, key)
	// A fifth attempt, were the cap broken, would be queued before the
	// queue is idle.
	idle(t, reg, w.Queue, key)
	if n := rec.count(key) - 1; n != 4 {
		t.Errorf("sync ran %d times, want 1 + 3 retries", n)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(errs) != 4 {
		t.Fatalf("OnError saw %d errors, want 4", len(errs))
	}
	for i, err := range errs {
		if dropped := errors.Is(err, ErrDropped); dropped != (i == 3) {
			t.Errorf("error %d (%v) is ErrDropped: %v; only the last, the drop's, is", i+1, err, dropped)
		}
	}
}

// idle waits for a retry whose backoff outlasts idleMoment: the queue's
// metrics show nothing of it while it waits, and an idle that read only
// them returned before the retry.
func TestIdleWaitsForARetry(t *testing.T) {
	rec := newRecorder()
	key := cache.NewObjectName("ns", "slow")
	reg := prometheus.NewRegistry()
	backoff := 2 * idleMoment
	w := &Worker{
		Queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.NewTypedItemExponentialFailureRateLimiter[cache.ObjectName](backoff, backoff),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: "slow", MetricsProvider: metrics.NewWorkqueueProvider(reg)}),
		MaxRetries: 3,
		Sync: func(_ context.Context, k cache.ObjectName) (time.Duration, error) {
			if rec.count(k) == 1 {
				rec.done <- k
				return 0, errors.New("boom")
			}
			return 0, nil
		},
	}
	runWorker(t, w)
	w.Queue.Add(key)
	waitFor(t, rec.done, key)
	idle(t, reg, w.Queue, key)
	if n := rec.count(key) - 1; n != 2 {
		t.Errorf("idle after %d syncs, want 2 (a failure, its retry)", n)
	}
}

func TestRequeueAfterAndPanicRecovery(t *testing.T) {
	rec := newRecorder()
	key := cache.NewObjectName("ns", "timed")
	w := &Worker{
		Queue:      New("", nil, clock.RealClock{}),
		MaxRetries: 5,
		Sync: func(_ context.Context, k cache.ObjectName) (time.Duration, error) {
			switch rec.count(k) {
			case 1:
				panic("odd object")
			case 2:
				return 50 * time.Millisecond, nil
			default:
				rec.done <- k
				return 0, nil
			}
		},
	}
	runWorker(t, w)
	w.Queue.Add(key)
	waitFor(t, rec.done, key)
}

// TestStopStartsNoSyncAndReportsNoCancellation: once told to stop, a worker
// finishes the sync in hand and starts no other, although the queue still
// holds keys, and the error of a sync cut short by the stop is not the
// key's error.
func TestStopStartsNoSyncAndReportsNoCancellation(t *testing.T) {
	var mu sync.Mutex
	var synced []cache.ObjectName
	var errs []error
	started := make(chan struct{})
	w := &Worker{
		Queue:      New("", nil, clock.RealClock{}),
		MaxRetries: 5,
		Sync: func(ctx context.Context, k cache.ObjectName) (time.Duration, error) {
			mu.Lock()
			synced = append(synced, k)
			mu.Unlock()
			if k.Name == "in-flight" {
				close(started)
				<-ctx.Done()
				return 0, ctx.Err()
			}
			return 0, nil
		},
		OnError: func(_ cache.ObjectName, err error) { mu.Lock(); errs = append(errs, err); mu.Unlock() },
	}
	for _, name := range []string{"in-flight", "queued-1", "queued-2"} {
		w.Queue.Add(cache.NewObjectName("ns", name))
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { w.Run(ctx, 1); close(stopped) }()
	<-started
	cancel()
	<-stopped

	mu.Lock()
	defer mu.Unlock()
	if len(synced) != 1 {
		t.Errorf("synced %v after the stop, want only the key in flight", synced)
	}
	if len(errs) != 0 {
		t.Errorf("OnError saw %v, want nothing: the stop is not the key's error", errs)
	}
	if n := w.Queue.Len(); n != 2 {
		t.Errorf("%d keys left in the queue, want the 2 never started", n)
	}
}
