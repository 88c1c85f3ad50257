package e2e

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// TestLeaderElection runs two replicas of the binary: exactly one
// reconciles; killing it with SIGKILL hands over to the other within the
// Lease's timings, and failures around the handover pause exactly once.
func TestLeaderElection(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	args := []string{"--leader-elect", "--leader-election-namespace", "kargo-latch", "--leader-election-id", "e2e-" + ns, "--pause-on-failure"}
	a, aURL := startMetricsProcess(t, ns, args...)
	waitFor(t, "a to win the first election", func() bool { return leaseHolder("e2e-"+ns) != "" })
	b, bURL := startMetricsProcess(t, ns, args...)

	before := env.createStage(t, ns, "before", nil)
	during := env.createStage(t, ns, "during", nil)
	promoteAndLatch(t, before)
	promoteAndLatch(t, during)

	syncs := func(url string) float64 {
		return series(scrape(t, url), "kargo_latch_reconcile_duration_seconds", nil)[""]
	}
	leader, leaderURL, standbyURL := a, aURL, bURL
	if syncs(aURL) == 0 {
		leader, leaderURL, standbyURL = b, bURL, aURL
	}
	if syncs(leaderURL) == 0 || syncs(standbyURL) != 0 {
		t.Fatalf("Stage syncs per replica: %v and %v; want exactly one replica reconciling", syncs(leaderURL), syncs(standbyURL))
	}

	// One failure just before the leader dies, one while no one leads.
	_, err := before.FinishPromotion(ctx, "Failed")
	must(t, err)
	time.Sleep(20 * time.Millisecond) // the fault's timing, not a wait: the leader dies just after the failure
	leader.kill()
	killedAt := time.Now()
	must(t, during.SetHealth(ctx, kargo.HealthUnhealthy))
	_, err = during.FinishPromotion(ctx, "Errored")
	must(t, err)

	waitPaused(t, during, true)
	failover := time.Since(killedAt)
	t.Logf("failover: the standby paused a Stage %v after the leader was killed", failover.Round(time.Millisecond))
	// The takeover, at most ~21s (cmd/kargo-latch/leader.go): the standby
	// sees the last renewal up to 4.4s late, waits the 12s lease, and polls
	// up to 4.4s later. The new holder stamps its acquireTime.
	lease, err := env.kube.CoordinationV1().Leases("kargo-latch").Get(ctx, "e2e-"+ns, metav1.GetOptions{})
	must(t, err)
	if lease.Spec.AcquireTime == nil {
		t.Fatal("the Lease has no acquireTime after the handover")
	}
	takeover := lease.Spec.AcquireTime.Sub(killedAt)
	t.Logf("takeover: the standby acquired the Lease %v after the leader was killed", takeover.Round(time.Millisecond))
	if takeover > 22*time.Second {
		t.Errorf("takeover took %v, want under 22s", takeover)
	}
	if failover > 25*time.Second {
		t.Errorf("failover took %v, want under 25s (the takeover, then the pausing sync)", failover)
	}
	waitPaused(t, before, true)
	// The new leader's first term judged both Stages; once it is idle, a
	// second pause or Event it would make is made.
	waitIdle(t, metricsAt(standbyURL), 1)
	if syncs(standbyURL) == 0 {
		t.Error("the new leader has not reconciled")
	}
	for _, s := range []string{before.Name, during.Name} {
		if n := pausesFor(t, ns, s); n != 1 {
			t.Errorf("%s: %d StagePauses across the failover, want 1", s, n)
		}
	}
	for _, s := range []*driver.Stage{before, during} {
		if n := env.eventCount(t, s, api.ReasonStagePaused); n != 1 {
			t.Errorf("%s: %d StagePaused Events across the failover, want 1", s.Name, n)
		}
	}
}

// leaseHolder is the holder of a leader election Lease of the operators
// under test; empty while no one holds it, or on an error.
func leaseHolder(name string) string {
	l, err := env.kube.CoordinationV1().Leases("kargo-latch").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}
