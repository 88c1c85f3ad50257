package e2e

import (
	"fmt"
	"net/http"
	"net/url"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kargo-latch/kargo-latch/latch"
)

// TestGaugesAfterFailoverResume runs two replicas of the binary and a real
// Prometheus scraping both with the shipped rules. A Stage is paused; the
// leader is frozen (SIGSTOP) while it holds the Lease, the standby takes
// the Lease over, and the pause is deleted and the resume stored through
// the new leader; then the old leader runs on (SIGCONT), without the Lease.
// Both replicas' /metrics show the Stage resumed, and KargoStagePaused
// resolves and stays resolved once Prometheus scrapes the old leader again.
// With gauges set by the syncs, the old leader kept exporting paused=1.
func TestGaugesAfterFailoverResume(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	leaseName := "e2e-" + ns
	args := []string{"--leader-elect", "--leader-election-namespace", "kargo-latch", "--leader-election-id", leaseName}
	lease := func() string {
		l, err := env.kube.CoordinationV1().Leases("kargo-latch").Get(ctx, leaseName, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	old, oldURL := startMetricsProcess(t, ns, args...)
	waitFor(t, "the first replica to take the Lease", func() bool { return lease() != "" })
	oldLeader := lease()
	_, newURL := startMetricsProcess(t, ns, args...)
	prom := startPrometheus(t, hostPort(oldURL), hostPort(newURL))

	s := env.createStage(t, ns, "prod", nil)
	promoteAndLatch(t, s)
	must(t, createPause(env.dev, pause(ns, "hold", "prod", "Manual")))
	waitPaused(t, s, true)
	prodSel := map[string]string{"project": ns, "stage": "prod"}
	gauges := func(url string) (paused, latched float64, scraped bool) {
		code, _, err := httpGet(url)
		if err != nil || code != http.StatusOK {
			return 0, 0, false // a stopped process does not answer
		}
		mfs := scrape(t, url)
		for _, v := range series(mfs, "kargo_latch_stage_paused", prodSel) {
			paused += v
		}
		return paused, series(mfs, "kargo_latch_stage_phase", prodSel)["phase="+string(latch.PhaseLatched)], true
	}
	for name, url := range map[string]string{"leader": oldURL, "standby": newURL} {
		waitFor(t, "the "+name+" to export the pause", func() bool {
			paused, latched, _ := gauges(url)
			return paused == 1 && latched == 1
		})
	}
	alertLabels := map[string]string{"project": ns, "stage": "prod", "reason": "Manual"}
	waitFor(t, "KargoStagePaused to fire", func() bool { return prom.firing(t, "KargoStagePaused", alertLabels) != nil })

	// The leader is frozen with the Lease; the standby takes it over.
	must(t, old.cmd.Process.Signal(syscall.SIGSTOP))
	stopped := time.Now()
	t.Cleanup(func() { _ = old.cmd.Process.Signal(syscall.SIGCONT) })
	waitLong(t, "the standby to take the Lease", time.Minute, func() bool { return lease() != oldLeader && lease() != "" })
	t.Logf("the standby took the Lease %v after the leader froze", time.Since(stopped).Round(time.Millisecond))

	// The resume goes through the new leader: only it can store the record.
	must(t, deletePause(env.lead, ns, "hold"))
	waitPaused(t, s, false)
	if r := stageRecord(t, s); len(r.Pauses) != 0 || r.Phase != latch.PhaseLatched {
		t.Fatalf("record after the resume: pauses %v, phase %s; want none, Latched", r.Pauses, r.Phase)
	}
	resumed := time.Now()
	waitFor(t, "the new leader to export the resume", func() bool {
		paused, latched, _ := gauges(newURL)
		return paused == 0 && latched == 1
	})
	waitFor(t, "KargoStagePaused to resolve", func() bool { return prom.firing(t, "KargoStagePaused", alertLabels) == nil })
	t.Logf("KargoStagePaused resolved %v after the resume", time.Since(resumed).Round(time.Millisecond))

	// The old leader runs on without the Lease: it exports the resume too,
	// still exporting the Stage (its phase), so the absence is no blank.
	must(t, old.cmd.Process.Signal(syscall.SIGCONT))
	continued := time.Now()
	waitFor(t, "the old leader to export the resume", func() bool {
		paused, latched, scraped := gauges(oldURL)
		return scraped && paused == 0 && latched == 1
	})
	t.Logf("the old leader exported the resume %v after it ran on", time.Since(continued).Round(time.Millisecond))
	exported := time.Now()
	if holder := lease(); holder == oldLeader {
		t.Errorf("the old leader holds the Lease again; the test needs it without")
	}

	// Prometheus scraped the old leader again (its series went stale while
	// it was frozen, and are back), and the alert's expression over both
	// replicas finds no paused Stage.
	oldInstance := hostPort(oldURL)
	// A scrape after the old leader exported the resume: one right after
	// SIGCONT may still hold its view from before the freeze.
	waitFor(t, "Prometheus to scrape the old leader again", func() bool {
		// timestamp() of a selector is its sample's scrape time; of an
		// expression (x == 1) it would be the evaluation's.
		return len(prom.query(t, fmt.Sprintf(`timestamp(kargo_latch_stage_phase{instance=%q,project=%q,stage="prod",phase="Latched"}) > %.3f`,
			oldInstance, ns, float64(exported.UnixMilli())/1000))) == 1
	})
	// The alert's state is that of the last rule evaluation, which may still
	// hold a scrape of the old leader's view from before the freeze.
	scraped := time.Now()
	waitFor(t, "Prometheus to evaluate the rules after that scrape", func() bool { return prom.evaluatedSince(t, scraped) })
	if got := prom.query(t, fmt.Sprintf(`max by (project, stage, reason) (kargo_latch_stage_paused{project=%q}) == 1`, ns)); len(got) != 0 {
		t.Errorf("KargoStagePaused's expression finds %v after the old leader's scrape, want nothing", got)
	}
	if a := prom.firing(t, "KargoStagePaused", alertLabels); a != nil {
		t.Errorf("KargoStagePaused fires again: %+v", a)
	}
}

func hostPort(metricsURL string) string {
	u, err := url.Parse(metricsURL)
	if err != nil {
		panic(err)
	}
	return u.Host
}
