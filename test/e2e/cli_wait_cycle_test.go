package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/kargo-latch/kargo-latch/cli"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/cluster"
)

// Review finding 1: after a rollback to Freight that Kargo verified in an
// earlier cycle, the Freight's verifiedIn mark is there at once, while the
// Stage is Unhealthy. wait --for=verified judges this cycle: it waits for
// the rolled-back cycle's latch, and ends once it latches.
func TestCLIWaitVerifiedAfterARollback(t *testing.T) {
	t.Parallel()
	ns, prod, good := latchedProd(t)
	// Kargo verified it in its cycle, which an incident's rollback comes
	// minutes or days after (Kargo writes times to the second).
	must(t, prod.MarkVerified(ctx, good, time.Now().Add(-10*time.Minute)))
	promote(t, prod)
	must(t, prod.SetHealth(ctx, kargo.HealthHealthy))
	waitPhase(t, prod, latch.PhaseLatched)

	rollback := rollBack(t, prod, good)
	must(t, prod.SetHealth(ctx, kargo.HealthUnhealthy))
	if r := waitPhase(t, prod, latch.PhasePromoted); r.Promotion != rollback {
		t.Fatalf("the cycle is promotion %s's, want the rollback's (%s)", r.Promotion, rollback)
	}

	wait := startCLI(t, env.cluster.Config, "wait", "prod", "-n", ns, "--for=verified", "--timeout", "2m")
	// It has read the Freight, and its mark of the earlier cycle.
	wait.says(&wait.stderr, "the cycle of promotion "+rollback+" is Promoted, waiting for the latch; Freight "+good+
		" was verified in the Stage before this cycle's promotion")
	wait.stillRunning("the rolled-back cycle has not latched")

	must(t, prod.SetHealth(ctx, kargo.HealthHealthy))
	checkWaitVerifiedExits(t, wait, good)
}

// Review finding 2: wait --for=verified watches only the cycle's Freight,
// by name. A pipeline whose ServiceAccount may read that Freight and no
// other is enough.
func TestCLIWaitVerifiedWatchesOnlyItsFreight(t *testing.T) {
	t.Parallel()
	ns, prod, freight := latchedProd(t)
	pipeline := pipelineAllowedOnly(t, ns, freight)

	wait := startCLI(t, pipeline, "wait", "prod", "-n", ns, "--for=verified", "--timeout", "1m")
	wait.says(&wait.stderr, "its Freight is not verified in the Stage yet")
	must(t, prod.MarkVerified(ctx, freight, time.Now()))
	checkWaitVerifiedExits(t, wait, freight)
	if strings.Contains(wait.stderr.String(), "cannot watch freights") {
		t.Errorf("the wait asked for more Freight than its own: %s", wait.stderr.String())
	}
}

// pipelineAllowedOnly is a pipeline's ServiceAccount in ns that may read
// the project's Stages and Promotions, and the one Freight named: RBAC
// resourceNames, which allow a list or watch only when selected by name.
func pipelineAllowedOnly(t *testing.T, ns, freight string) *rest.Config {
	t.Helper()
	rule := func(resource string, names ...string) map[string]any {
		r := cluster.Rule(kargo.GroupVersion.Group, resource, "get", "list", "watch")
		if len(names) > 0 {
			r["resourceNames"] = names
		}
		return r
	}
	cfg := serviceAccountWithRole(t, ns, "pipeline", rule("stages"), rule("promotions"), rule("freights", freight))
	freights := dynamic.NewForConfigOrDie(cfg).Resource(kargo.FreightsResource).Namespace(ns)
	waitFor(t, "the pipeline's rights", func() bool {
		_, err := freights.Get(ctx, freight, metav1.GetOptions{})
		return err == nil
	})
	if _, err := freights.List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatal("the pipeline may list every Freight: the test proves nothing")
	}
	return cfg
}

// Review finding 2: kube-apiserver stops while waits run, without
// --timeout. Each exits 1 ("could not be reached") once the API server has
// not answered for its --unreachable-timeout (the default, 1m, and 10s),
// and not before; a wait with a longer bound rides the outage out and
// reaches its condition once the API server is back.
func TestCLIWaitGivesUpWhenTheAPIServerGoesAway(t *testing.T) {
	t.Parallel()
	w, err := newWorld(ctx, cluster.Options{}, nil)
	must(t, err)
	t.Cleanup(w.cluster.Stop)
	ns := w.newProject(t)
	w.createStage(t, ns, "prod", nil)

	byDefault := startCLI(t, w.cluster.Config, "wait", "prod", "-n", ns, "--for=latched")
	short := startCLI(t, w.cluster.Config, "wait", "prod", "-n", ns, "--for=latched", "--unreachable-timeout", "10s")
	rides := startCLI(t, w.cluster.Config, "wait", "prod", "-n", ns, "--for=paused", "--unreachable-timeout", "5m")
	for _, r := range []*cliRun{byDefault, short} {
		r.says(&r.stderr, "the Stage has no promotion yet")
	}
	rides.says(&rides.stderr, "the Stage is not paused")

	// The kernel closes the API server's sockets before its exit is
	// reported: giving up early is measured from before the kill, giving
	// up late from after it.
	killed := time.Now()
	w.cluster.StopAPIServer()
	stopped := time.Now()
	for _, r := range []*cliRun{byDefault, short, rides} {
		r.says(&r.stderr, "the API server does not answer (")
	}
	for _, c := range []struct {
		run   *cliRun
		bound time.Duration
	}{{short, 10 * time.Second}, {byDefault, cli.DefaultUnreachableTimeout}} {
		code := c.run.exitWithin(c.bound + time.Minute)
		took := c.run.endedAt.Sub(stopped)
		t.Logf("%v: exit %d %v after the API server stopped", c.run.args, code, took.Round(time.Millisecond))
		if want := "could not be reached for " + c.bound.String(); code != cli.ExitFailed || !strings.Contains(c.run.stderr.String(), want) {
			t.Errorf("%v: exit %d, stderr %q; want exit 1: %s", c.run.args, code, c.run.stderr.String(), want)
		}
		if c.run.endedAt.Sub(killed) < c.bound || took > c.bound+20*time.Second {
			t.Errorf("%v gave up %v after the API server stopped, want within 20s after %v", c.run.args, took, c.bound)
		}
	}

	rides.stillRunning("its bound has not passed")
	must(t, w.cluster.StartAPIServer(context.Background()))
	must(t, createPause(w.dyn, pause(ns, "incident", "prod", "Incident")))
	// The informers retry with a back-off of up to a minute.
	if code := rides.exitWithin(2 * time.Minute); code != cli.ExitOK || !strings.Contains(rides.stdout.String(), "the Stage is paused by StagePause incident") {
		t.Errorf("the wait that rode the outage out: exit %d, stdout %q", code, rides.stdout.String())
	}
}
