package e2e

import (
	"testing"
	"time"
)

// TestPrometheusFiresOnPause: a real Prometheus scrapes the operator binary
// and evaluates the shipped rules; a failure that pauses a Stage fires
// KargoStagePaused with the Stage's labels, and the resume resolves it.
func TestPrometheusFiresOnPause(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	metricsURL := metricsProcess(t, ns, "--pause-on-failure")
	prom := startPrometheus(t, metricsURL[len("http://"):len(metricsURL)-len("/metrics")])

	s := env.createStage(t, ns, "prod", nil)
	promoteAndLatch(t, s)
	_, err := s.FinishPromotion(ctx, "Failed")
	must(t, err)
	waitPaused(t, s, true)
	pausedAt := time.Now()

	labels := map[string]string{"project": ns, "stage": "prod", "reason": "PromotionFailed", "severity": "warning"}
	waitFor(t, "KargoStagePaused to fire", func() bool { return prom.firing(t, "KargoStagePaused", labels) != nil })
	t.Logf("KargoStagePaused fired %v after the pause (1s scrape and evaluation)", time.Since(pausedAt).Round(time.Millisecond))

	must(t, deletePause(env.lead, ns, stageRecord(t, s).Failure.Pause))
	waitPaused(t, s, false)
	resumedAt := time.Now()
	waitFor(t, "KargoStagePaused to resolve", func() bool { return prom.firing(t, "KargoStagePaused", labels) == nil })
	t.Logf("KargoStagePaused resolved %v after the resume", time.Since(resumedAt).Round(time.Millisecond))
}
