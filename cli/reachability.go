package cli

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/utils/clock"
)

// A wait must end when the API server goes away: client-go's informers
// retry a refused connection for ever, quietly and with a back-off of up to
// a minute, so a wait without --timeout would never end. reachability
// hears every list and watch request of a wait's informers, and gives up
// once the API server has not answered for a bound (--unreachable-timeout).
//
// Any answer counts as reachable, a refusal (403) or an expired
// resourceVersion (410) too; a connection that fails, a timeout, or a 5xx
// (a load balancer or an API server that cannot serve) does not.

// DefaultUnreachableTimeout is --unreachable-timeout's default: longer
// than kube-apiserver's restart in a rolling upgrade, short enough for a CI
// step.
const DefaultUnreachableTimeout = time.Minute

// probeTimeout bounds the last read made before giving up.
const probeTimeout = 10 * time.Second

// errUnreachable is a wait's end when the API server stopped answering.
type errUnreachable struct {
	bound time.Duration
	err   error
}

func (e *errUnreachable) Error() string {
	return fmt.Sprintf("the API server could not be reached for %s: %v", e.bound, e.err)
}

func (e *errUnreachable) Unwrap() error { return e.err }

type reachability struct {
	clock clock.WithDelayedExecution
	bound time.Duration
	// probe is one read that shows whether the API server answers, made
	// before giving up: an informer may not retry for up to a minute after
	// the API server is back.
	probe   func(context.Context) error
	changed chan<- struct{}
	lost    chan struct{}
	// probing is the context of the probe: close cancels it, so that a
	// wait that ended does not linger on a last read.
	probing    context.Context
	stopProbes context.CancelFunc

	mu sync.Mutex
	// since is when the API server first did not answer, after its last
	// answer; zero while it answers.
	since time.Time
	err   error // the last failure
	// round counts the times the API server stopped answering, so that the
	// timer of an earlier round gives nothing up.
	round int
	// timer gives up at the end of the current round; nil between rounds.
	timer clock.Timer
	gone  bool
	// closed is set once the wait ended: nothing is given up any more.
	closed bool
}

func newReachability(c clock.WithDelayedExecution, bound time.Duration, probe func(context.Context) error, changed chan<- struct{}) *reachability {
	probing, stopProbes := context.WithCancel(context.Background())
	return &reachability{clock: c, bound: bound, probe: probe, changed: changed, lost: make(chan struct{}),
		probing: probing, stopProbes: stopProbes}
}

// close ends the watch over the API server when the wait ends: nothing is
// given up any more, a last read under way is cancelled, and the round's
// timer is stopped.
func (r *reachability) close() {
	r.mu.Lock()
	r.closed = true
	timer := r.takeTimer()
	r.mu.Unlock()
	r.stopProbes()
	stop(timer)
}

// takeTimer takes the round's timer away, for stop: a timer is stopped
// without the lock held, as the timer's function takes it.
func (r *reachability) takeTimer() clock.Timer {
	t := r.timer
	r.timer = nil
	return t
}

func stop(t clock.Timer) {
	if t != nil {
		t.Stop()
	}
}

// heard records the outcome of one request.
func (r *reachability) heard(err error) {
	if errors.Is(err, context.Canceled) {
		return // the wait, or one of its watches, ended: no news
	}
	stop(r.record(err))
}

// record records the outcome of one request, and returns the timer of a
// round that ended, to stop.
func (r *reachability) record(err error) clock.Timer {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.gone || r.closed:
	case answered(err):
		if !r.since.IsZero() {
			r.since = time.Time{}
			r.notify()
			return r.takeTimer()
		}
	default:
		r.err = err
		if r.since.IsZero() {
			r.since = r.clock.Now()
			r.round++
			round := r.round
			r.timer = r.clock.AfterFunc(r.bound, func() { r.expire(round) })
			r.notify()
		}
	}
	return nil
}

// expire gives up, when the API server has still not answered since the
// round began, and does not answer the probe.
func (r *reachability) expire(round int) {
	if !r.firedIn(round) {
		return
	}
	ctx, cancel := context.WithTimeout(r.probing, probeTimeout)
	err := r.probe(ctx)
	cancel()
	if answered(err) {
		r.heard(nil)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.round != round || r.since.IsZero() || r.gone || r.closed {
		return // it answered meanwhile, or the wait ended
	}
	r.err, r.gone = err, true
	close(r.lost)
}

// firedIn reports whether the API server has still not answered since
// round began, whose timer fired (nothing is left to stop).
func (r *reachability) firedIn(round int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.round != round || r.since.IsZero() || r.gone || r.closed {
		return false
	}
	r.timer = nil
	return true
}

// unreachable is closed once the wait gives up.
func (r *reachability) unreachable() <-chan struct{} { return r.lost }

// cause is the error a wait that gave up ends with.
func (r *reachability) cause() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return &errUnreachable{bound: r.bound, err: r.err}
}

// state says, for people, whether the API server does not answer now; ""
// while it answers.
func (r *reachability) state() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.since.IsZero() {
		return ""
	}
	return fmt.Sprintf("the API server does not answer (%v); giving up unless it answers within %s of %s",
		r.err, r.bound, r.since.UTC().Format(time.RFC3339))
}

func (r *reachability) notify() {
	select {
	case r.changed <- struct{}{}:
	default:
	}
}

// answered reports whether err (nil for success) came from an API server
// that answered and could serve.
func answered(err error) bool {
	if err == nil {
		return true
	}
	var status apierrors.APIStatus
	code := int32(0)
	if errors.As(err, &status) {
		code = status.Status().Code
	}
	return code > 0 && code < http.StatusInternalServerError
}
