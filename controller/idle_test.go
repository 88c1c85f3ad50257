package controller

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/utils/clock"

	"github.com/kargo-latch/kargo-latch/latch"
)

// delayClock is the real clock that keeps count of the timers it made and
// that have neither fired nor been stopped. The controller makes timers
// only through its work queues, whose delayed adds (AddAfter, and
// AddRateLimited after a failed sync) each wait on one: a pending timer is
// work that the queue's metrics do not show yet.
type delayClock struct {
	clock.RealClock
	mu      sync.Mutex
	pending map[*delayTimer]time.Time // when each is due
}

func newDelayClock() *delayClock { return &delayClock{pending: map[*delayTimer]time.Time{}} }

type delayTimer struct {
	clock *delayClock
	timer *time.Timer
	c     chan time.Time
}

func (c *delayClock) NewTimer(d time.Duration) clock.Timer {
	t := &delayTimer{clock: c, c: make(chan time.Time, 1)}
	c.arm(t, d)
	t.timer = time.AfterFunc(d, t.fire)
	return t
}

func (c *delayClock) arm(t *delayTimer, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending[t] = time.Now().Add(d)
}

func (c *delayClock) disarm(t *delayTimer) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pending, t)
}

// dueWithin reports whether a pending timer is due within d from now.
func (c *delayClock) dueWithin(d time.Duration) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	horizon := time.Now().Add(d)
	for _, due := range c.pending {
		if due.Before(horizon) {
			return true
		}
	}
	return false
}

// fire delivers the tick, then stops counting the timer: the work it
// releases is in the queue's metrics once the tick is taken.
func (t *delayTimer) fire() {
	select {
	case t.c <- time.Now():
	default:
	}
	t.clock.disarm(t)
}

func (t *delayTimer) C() <-chan time.Time { return t.c }

func (t *delayTimer) Stop() bool {
	t.clock.disarm(t)
	return t.timer.Stop()
}

func (t *delayTimer) Reset(d time.Duration) bool {
	t.clock.arm(t, d)
	return t.timer.Reset(d)
}

// idle waits for work a failed sync left for later, not only for the work
// the queue shows: a sync retried with backoff (here, after 8 refused
// stores, 640 ms away) is not in the queue's metrics while it waits, nor is
// a mark tried again after markErrorRetryFirst. An idle that saw only the
// metrics returned while either waited.
func TestIdleWaitsForDelayedWork(t *testing.T) {
	t.Run("a store retried with backoff", func(t *testing.T) {
		var tries atomic.Int64
		f := newFixtureWith(t, false, func(f *fixture) {
			f.client.PrependReactor("patch", "stages", func(k8stesting.Action) (bool, runtime.Object, error) {
				if tries.Add(1) <= 8 {
					return true, nil, apierrors.NewServiceUnavailable("etcd is down")
				}
				return false, nil, nil
			})
		}, healthyStage("prod", nil))
		waitUntil(t, func() bool { return tries.Load() >= 1 })
		f.idle()
		if n, phase := tries.Load(), f.record("prod").Phase; n != 9 || phase != latch.PhaseLatched {
			t.Errorf("idle after %d tries to store, phase %s; want 9 (8 refused), Latched", n, phase)
		}
	})
	t.Run("a mark tried again later", func(t *testing.T) {
		var tries atomic.Int64
		f := newFixtureWith(t, false, func(f *fixture) {
			f.client.PrependReactor("patch", "freights", func(k8stesting.Action) (bool, runtime.Object, error) {
				if tries.Add(1) == 1 {
					return true, nil, apierrors.NewServiceUnavailable("etcd is down")
				}
				return false, nil, nil
			})
		}, markableStage("prod"), freightF1())
		waitUntil(t, func() bool { return tries.Load() >= 1 })
		f.idle()
		if n, marked := tries.Load(), f.record("prod").Marked; n != 2 || len(marked) != 1 {
			t.Errorf("idle after %d tries to mark, marked %v; want 2 (1 refused), f1", n, marked)
		}
	})
}
