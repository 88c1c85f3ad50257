package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/cluster"
)

// The outage of these tests: kube-apiserver is stopped for 30 s, on a
// cluster of the test's own, and started again on the same etcd data.
const outage = 30 * time.Second

// TestAPIServerOutage: the operator (with leader election) must not exit,
// and must converge: a degradation whose grace ran out during the outage
// pauses, and a failure made just before the outage pauses.
func TestAPIServerOutage(t *testing.T) {
	t.Parallel()
	w, err := newWorld(ctx, cluster.Options{}, nil)
	must(t, err)
	t.Cleanup(w.cluster.Stop)
	ns := w.newProject(t)
	op := startOutageOperator(t, w, "--namespace", ns, "--degraded-grace", "5s", "--pause-on-failure")

	stages := w.latchedStages(t, ns, "degrading", "failing", "steady")
	degrading, failing, steady := stages[0], stages[1], stages[2]
	must(t, degrading.SetHealth(ctx, kargo.HealthUnhealthy))
	waitPhase(t, degrading, latch.PhaseDegraded)
	_, err = failing.FinishPromotion(ctx, "Failed")
	must(t, err)

	w.cluster.StopAPIServer()
	time.Sleep(outage) // the outage itself: the scenario, not a wait
	if op.exited() {
		t.Fatal("the operator exited during the API server outage")
	}
	restarted := time.Now()
	must(t, w.cluster.StartAPIServer(context.Background()))

	waitLong(t, "the degraded Stage to be paused", 90*time.Second, func() bool { return paused(t, degrading) })
	waitLong(t, "the failed Stage to be paused", 90*time.Second, func() bool { return paused(t, failing) })
	t.Logf("converged %v after the API server came back from a %v outage", time.Since(restarted).Round(time.Millisecond), outage)
	if op.exited() {
		t.Fatal("the operator exited after the API server outage")
	}
	if r := stageRecord(t, steady); r.Phase != latch.PhaseLatched {
		t.Errorf("the steady Stage is %s after the outage, want Latched", r.Phase)
	}
}

// TestReliabilityAPIServerOutage runs the reliability scenario, checked
// against the oracle, with the API server down for 30 s in the middle of
// it. Kargo and the people of the scenario wait the outage out (their
// requests are held while the API server is down); the operator faces it.
func TestReliabilityAPIServerOutage(t *testing.T) {
	t.Parallel()
	// A request holds down for reading until its response is read, so the
	// API server is never stopped under one.
	var down sync.RWMutex
	holdDuringOutage := func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			down.RLock()
			resp, err := rt.RoundTrip(r)
			if err != nil {
				down.RUnlock()
				return nil, err
			}
			resp.Body = &unlockOnClose{ReadCloser: resp.Body, unlock: down.RUnlock}
			return resp, nil
		})
	}
	w, err := newWorld(ctx, cluster.Options{}, holdDuringOutage)
	must(t, err)
	t.Cleanup(w.cluster.Stop)
	ns, wideNS := w.newProject(t), w.newProject(t)
	op := startOutageOperator(t, w, scenarioArgs(ns, wideNS)...)

	var converged sync.WaitGroup
	converged.Go(func() {
		time.Sleep(3 * time.Second) // the fault's timing, not a wait: mid-scenario
		down.Lock()
		w.cluster.StopAPIServer()
		time.Sleep(outage) // the outage itself
		err := w.cluster.StartAPIServer(context.Background())
		down.Unlock()
		if err != nil {
			t.Errorf("restarting the API server: %v", err)
		}
	})
	reliabilityScenario(t, w, ns, wideNS, op, func() string {
		converged.Wait()
		if op.exited() {
			t.Error("the operator exited")
		}
		return fmt.Sprintf("the API server down for %v mid-scenario", outage)
	})
}

// startOutageOperator runs the operator binary on w's cluster with leader
// election, as deployed, and waits until it is ready. Its probe and metrics
// addresses replace any given in args.
func startOutageOperator(t *testing.T, w *world, args ...string) *process {
	t.Helper()
	probe := freePort(t)
	args = append(args, "--leader-elect", "--leader-election-namespace", "kargo-latch",
		"--health-probe-bind-address", "127.0.0.1:"+strconv.Itoa(probe))
	op := newMeteredProcess(t, w.operator, args...)
	op.start()
	waitFor(t, "the operator to be ready", func() bool {
		code, _, err := httpGet(fmt.Sprintf("http://127.0.0.1:%d/readyz", probe))
		return err == nil && code == http.StatusOK
	})
	return op
}

// unlockOnClose calls unlock once, when the body is closed.
type unlockOnClose struct {
	io.ReadCloser
	once   sync.Once
	unlock func()
}

func (u *unlockOnClose) Close() error {
	err := u.ReadCloser.Close()
	u.once.Do(u.unlock)
	return err
}
