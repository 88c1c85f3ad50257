package e2e

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// TestMetricsOverAScenario reads the operator binary's /metrics through a
// scripted scenario: phases stay one-hot, counters count transitions and not
// reconciles, every latch is observed, and a deleted Stage leaves no series.
func TestMetricsOverAScenario(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	url := metricsProcess(t, ns, "--degraded-grace", "1h")
	prod := env.createStage(t, ns, "prod", nil)
	qa := env.createStage(t, ns, "qa", nil)
	stageSel := func(s string) map[string]string { return map[string]string{"project": ns, "stage": s} }

	// The phase gauges are read from the operator's cache at scrape time,
	// which learns of the operator's own write after the API server does:
	// wait for the phase, then check that it is the only one.
	oneHot := func(stage string, want latch.Phase) {
		t.Helper()
		var got map[string]float64
		waitFor(t, stage+"'s phase series to report "+string(want), func() bool {
			got = series(scrape(t, url), "kargo_latch_stage_phase", stageSel(stage))
			return got["phase="+string(want)] == 1
		})
		ones := 0
		for k, v := range got {
			if v == 1 {
				ones++
				if k != "phase="+string(want) {
					t.Errorf("%s: phase series %s is 1, want phase=%s", stage, k, want)
				}
			}
		}
		if ones != 1 || len(got) != len(latch.Phases) {
			t.Errorf("%s: phase series %v are not one-hot over the %d phases", stage, got, len(latch.Phases))
		}
	}
	value := func(name string, match map[string]string) float64 {
		var total float64
		for _, v := range series(scrape(t, url), name, match) {
			total += v
		}
		return total
	}

	// Let the operator see the new Stages first: a cycle it did not see
	// begin is adopted, and its time to latch is not observed.
	waitPhase(t, prod, latch.PhaseIdle)
	waitPhase(t, qa, latch.PhaseIdle)
	latchesBefore := value("kargo_latch_time_to_latch_seconds", nil)
	promoteAndLatch(t, prod)
	promoteAndLatch(t, qa)
	waitFor(t, "two time-to-latch observations", func() bool {
		return value("kargo_latch_time_to_latch_seconds", nil) == latchesBefore+2
	})
	oneHot("prod", latch.PhaseLatched)
	oneHot("qa", latch.PhaseLatched)

	// Flaps: each turn to Progressing is one ignored transition. Each step
	// waits until the operator has synced it, so that no flap is coalesced.
	const turns = 6
	syncs := func() float64 { return value("kargo_latch_reconcile_duration_seconds", nil) }
	for i := range turns {
		must(t, prod.SetHealth(ctx, kargo.HealthProgressing))
		waitFor(t, "the flap to be counted", func() bool {
			return value("kargo_latch_progressing_ignored_total", stageSel("prod")) == float64(i+1)
		})
		before := syncs()
		must(t, prod.SetHealth(ctx, kargo.HealthHealthy))
		waitFor(t, "the operator to see Healthy", func() bool { return syncs() > before })
	}

	// Two pauses, with many reconciles of the paused Stage in between.
	pauses := func() float64 { return value("kargo_latch_pauses_total", stageSel("prod")) }
	for i, name := range []string{"first", "second"} {
		must(t, createPause(env.dev, pause(ns, name, "prod", "Manual")))
		waitPaused(t, prod, true)
		waitProcessed(t, metricsAt(url), "ten flaps of the paused Stage", func() error {
			for range 10 {
				if err := prod.SetHealth(ctx, kargo.HealthProgressing); err != nil {
					return err
				}
				if err := prod.SetHealth(ctx, kargo.HealthHealthy); err != nil {
					return err
				}
			}
			return nil
		})
		if got := pauses(); got != float64(i+1) {
			t.Errorf("after pause %d: kargo_latch_pauses_total = %v, want %d", i+1, got, i+1)
		}
		if got := value("kargo_latch_stage_paused", stageSel("prod")); got != 1 {
			t.Errorf("kargo_latch_stage_paused = %v while paused, want 1", got)
		}
		must(t, deletePause(env.lead, ns, name))
		waitPaused(t, prod, false)
	}
	waitFor(t, "the paused gauge to go", func() bool { return value("kargo_latch_stage_paused", stageSel("prod")) == 0 })
	if got := value("kargo_latch_resumes_total", stageSel("prod")); got != 2 {
		t.Errorf("kargo_latch_resumes_total = %v, want 2", got)
	}
	oneHot("prod", latch.PhaseLatched)

	// Deleting a Stage removes its series.
	must(t, env.dyn.Resource(kargo.StagesResource).Namespace(ns).Delete(context.Background(), "qa", metav1.DeleteOptions{}))
	waitFor(t, "qa's series to go", func() bool {
		for name, mf := range scrape(t, url) {
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "stage" && l.GetValue() == "qa" && strings.HasPrefix(name, "kargo_latch_") {
						return false
					}
				}
			}
		}
		return true
	})
	oneHot("prod", latch.PhaseLatched)
}
