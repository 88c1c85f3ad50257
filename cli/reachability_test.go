package cli

import (
	"context"
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clocktesting "k8s.io/utils/clock/testing"
)

// refused is what a request to a stopped API server fails with.
var refused = &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}

func TestAnswered(t *testing.T) {
	stages := schema.GroupResource{Group: "kargo.akuity.io", Resource: "stages"}
	for name, c := range map[string]struct {
		err  error
		want bool
	}{
		"success":             {nil, true},
		"forbidden":           {apierrors.NewForbidden(stages, "prod", errors.New("no")), true},
		"gone":                {apierrors.NewResourceExpired("too old"), true},
		"not found":           {apierrors.NewNotFound(stages, "prod"), true},
		"too many requests":   {apierrors.NewTooManyRequests("slow down", 1), true},
		"connection refused":  {refused, false},
		"a timeout":           {context.DeadlineExceeded, false},
		"service unavailable": {apierrors.NewServiceUnavailable("no backend"), false},
		"internal error":      {apierrors.NewInternalError(errors.New("etcd")), false},
	} {
		if got := answered(c.err); got != c.want {
			t.Errorf("%s: answered = %v, want %v", name, got, c.want)
		}
	}
}

// reachabilityAt is a reachability on a fake clock whose probe answers
// with *probe. The fake clock runs timers in the goroutine that steps it.
func reachabilityAt(probe *error) (*reachability, *clocktesting.FakeClock) {
	clock := clocktesting.NewFakeClock(now)
	r := newReachability(clock, time.Minute, func(context.Context) error { return *probe }, make(chan struct{}, 1))
	return r, clock
}

func isLost(r *reachability) bool {
	select {
	case <-r.unreachable():
		return true
	default:
		return false
	}
}

// The API server stops answering: the wait gives up once it has not
// answered for the bound, and not before.
func TestReachabilityGivesUpAfterTheBound(t *testing.T) {
	probe := error(refused)
	r, clock := reachabilityAt(&probe)
	r.heard(nil)
	r.heard(refused)
	if s := r.state(); !strings.Contains(s, "the API server does not answer (dial tcp: connect: connection refused)") {
		t.Errorf("state %q", s)
	}
	clock.Step(30 * time.Second)
	r.heard(refused) // the informers retry, and fail again
	clock.Step(29 * time.Second)
	if isLost(r) {
		t.Fatal("gave up before the bound")
	}
	clock.Step(time.Second)
	if !isLost(r) {
		t.Fatal("did not give up at the bound")
	}
	var unreachable *errUnreachable
	if err := r.cause(); !errors.As(err, &unreachable) || err.Error() != "the API server could not be reached for 1m0s: dial tcp: connect: connection refused" {
		t.Errorf("cause %v", err)
	}
}

// An answer in between starts the count again; a refusal is an answer.
func TestReachabilityCountsFromTheLastAnswer(t *testing.T) {
	probe := error(refused)
	r, clock := reachabilityAt(&probe)
	r.heard(refused)
	clock.Step(50 * time.Second)
	r.heard(apierrors.NewForbidden(schema.GroupResource{Resource: "freights"}, "f", errors.New("no")))
	if r.state() != "" {
		t.Errorf("state %q after an answer, want none", r.state())
	}
	r.heard(refused)
	clock.Step(50 * time.Second) // the first round's timer fires: it answered since
	if isLost(r) {
		t.Fatal("gave up on the first round, after an answer")
	}
	clock.Step(10 * time.Second)
	if !isLost(r) {
		t.Fatal("did not give up on the second round")
	}
}

// The informers back off up to a minute between retries: at the bound, a
// last read finds the API server back, and the wait goes on.
func TestReachabilityProbesBeforeGivingUp(t *testing.T) {
	var probe error
	r, clock := reachabilityAt(&probe)
	r.heard(refused)
	clock.Step(time.Minute)
	if isLost(r) || r.state() != "" {
		t.Fatalf("gave up (%v) or still failing (%q) although the API server answered the probe", isLost(r), r.state())
	}
	// Canceled requests (a watch the wait stopped) are no news.
	r.heard(context.Canceled)
	if r.state() != "" {
		t.Errorf("a canceled request counted as a failure: %q", r.state())
	}
}

// Review finding L9: a wait that ended stops its round's timer, and
// cancels a last read under way: nothing of it outlives the wait.
func TestReachabilityCloseStopsTheTimerAndTheProbe(t *testing.T) {
	probed := make(chan struct{}, 1)
	clock := clocktesting.NewFakeClock(now)
	r := newReachability(clock, time.Minute, func(ctx context.Context) error {
		probed <- struct{}{}
		<-ctx.Done() // the API server does not answer the last read
		return ctx.Err()
	}, make(chan struct{}, 1))

	r.heard(refused)
	if !clock.HasWaiters() {
		t.Fatal("no timer for the round")
	}
	r.heard(nil) // an answer ends the round: its timer goes
	if clock.HasWaiters() {
		t.Error("the timer of a round that ended is still pending")
	}

	r.heard(refused)
	stepped := make(chan struct{})
	go func() { clock.Step(time.Minute); close(stepped) }() // the timer fires: the last read
	select {
	case <-probed:
	case <-time.After(10 * time.Second):
		t.Fatal("no last read at the bound")
	}
	r.close()
	select {
	case <-stepped:
	case <-time.After(10 * time.Second):
		t.Fatal("the last read was not cancelled when the wait ended")
	}
	if isLost(r) {
		t.Error("gave up after the wait ended")
	}

	r2 := newReachability(clock, time.Minute, func(context.Context) error { return refused }, make(chan struct{}, 1))
	r2.heard(refused)
	r2.close()
	if clock.HasWaiters() {
		t.Error("the round's timer is still pending after the wait ended")
	}
}
