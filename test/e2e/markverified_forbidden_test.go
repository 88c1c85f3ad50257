package e2e

import (
	"testing"
	"time"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// TestMarkVerifiedForbiddenWithoutTheRight: mark-verified on, the operator
// without the mark-verified component (the default install's identity). One
// MarkVerifiedForbidden Warning per cycle however often the operator tries
// again (every minute), the error counter, and the latch, failures and
// pauses carry on as usual. Two Stages share the minute the retry takes:
// "steady" stays in its cycle across the retry, "test" is in a new cycle
// when it comes.
func TestMarkVerifiedForbiddenWithoutTheRight(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	settings := fastSettings()
	settings.PauseOnFailure = true
	op := startOperator(t, ns, settings)
	annotations := map[string]string{api.MarkVerifiedAnnotation: "true", api.DegradedGraceAnnotation: "1s"}
	steady := env.createStage(t, ns, "steady", annotations, appsAB)
	s := env.createStage(t, ns, "test", annotations, appsAB)
	refusals := func(s *driver.Stage) float64 {
		return op.metric("kargo_latch_mark_verified_errors_total", "project", ns, "stage", s.Name)
	}

	_, steadyFreight := latchByApps(t, steady)
	refusedAt := time.Now()
	r, first := latchByApps(t, s)
	if r.LatchedBy != latch.LatchedByApps || len(r.Marked) != 0 {
		t.Errorf("latched record: latchedBy %q, marked %q; want Applications and none", r.LatchedBy, r.Marked)
	}
	for _, stage := range []*driver.Stage{steady, s} {
		if ev := waitEvent(t, stage, api.ReasonMarkVerifiedForbidden); ev.Type != "Warning" {
			t.Errorf("%s: MarkVerifiedForbidden Event type = %s, want Warning", stage.Name, ev.Type)
		}
		if n := refusals(stage); n != 1 {
			t.Errorf("%s: kargo_latch_mark_verified_errors_total = %v, want 1", stage.Name, n)
		}
	}
	assertNotVerified(t, op, s, first, "without the right")

	// The rest of the cycle as usual: flaps are ignored, a person's pause
	// and resume work, a degradation fails and pauses.
	op.sees(t, "the Stage Healthy", func() error {
		return s.SetAppsHealth(ctx, "Healthy", app("a", "Healthy"), app("b", "Healthy"))
	})
	op.sees(t, "the Stage Progressing again", func() error {
		return s.SetAppsHealth(ctx, "Progressing", app("a", "Healthy"), app("b", "Progressing"))
	})
	if got := stageRecord(t, s).Phase; got != latch.PhaseLatched {
		t.Errorf("after a flap: phase %s, want Latched", got)
	}
	must(t, createPause(env.dev, pause(ns, "hold", s.Name, "Manual")))
	waitPaused(t, s, true)
	must(t, deletePause(env.lead, ns, "hold"))
	waitPaused(t, s, false)
	must(t, s.SetHealth(ctx, "Unhealthy"))
	failed := waitPhase(t, s, latch.PhaseFailed)
	waitPaused(t, s, true)
	if failed.Failure.Reason != latch.ReasonDegraded || failed.Failure.Pause == "" {
		t.Errorf("failure %+v, want Degraded with a pause", failed.Failure)
	}
	must(t, deletePause(env.lead, ns, failed.Failure.Pause))
	waitPaused(t, s, false)
	r, second := latchByApps(t, s)
	if r.Phase != latch.PhaseLatched {
		t.Errorf("second cycle: phase %s, want Latched", r.Phase)
	}

	// The retry, a minute after the refusals: a new cycle is warned about
	// again, the same one is not.
	untilRetry := time.Until(refusedAt.Add(time.Minute + waitLimit))
	waitLong(t, "the retry on "+steady.Name, untilRetry, func() bool { return refusals(steady) >= 2 })
	waitLong(t, "the second cycle's MarkVerifiedForbidden", untilRetry, func() bool {
		return env.eventCount(t, s, api.ReasonMarkVerifiedForbidden) == 2
	})
	// The retries are counted in the syncs that would warn again; once the
	// operator is idle, those syncs are over.
	op.idle(t)
	if n := env.eventCount(t, steady, api.ReasonMarkVerifiedForbidden); n != 1 {
		t.Errorf("%s: %d MarkVerifiedForbidden Events in one cycle refused %v times, want 1", steady.Name, n, refusals(steady))
	}
	if n := env.eventCount(t, s, api.ReasonMarkVerifiedForbidden); n != 2 {
		t.Errorf("%s: %d MarkVerifiedForbidden Events for two cycles, want 2", s.Name, n)
	}
	if n := refusals(s); n < 2 {
		t.Errorf("%s: kargo_latch_mark_verified_errors_total = %v after two refused cycles, want at least 2", s.Name, n)
	}
	assertNotVerified(t, op, steady, steadyFreight, "retried without the right")
	assertNotVerified(t, op, s, second, "second cycle without the right")
	for _, stage := range []*driver.Stage{steady, s} {
		if got := stageRecord(t, stage).Phase; got != latch.PhaseLatched {
			t.Errorf("%s after the refused retry: phase %s, want Latched", stage.Name, got)
		}
	}
	select {
	case <-op.done:
		t.Error("the operator stopped")
	default:
	}
}
