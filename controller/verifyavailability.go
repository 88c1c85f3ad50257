package controller

import (
	"context"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// Verify-on-latch is on in a project while the operator can watch its
// AnalysisRuns there (runinformer.go); else it is off there, reported (a
// Warning per Stage, kargo_latch_verify_on_latch_available, /readyz), and
// the latch, the pauses and the gate carry on without it. It turns on again
// by itself: client-go retries a refused list of a cache within 60 s, and
// the caches are looked at every runCacheCheckInterval, so verify-on-latch
// is back at most about 65 s after the CRDs are installed or the rights
// granted, without a restart.

// runCacheCheckInterval is how often the AnalysisRun caches are looked
// after: the per-project caches made or stopped, the availability of each
// project reported, and a project's Stages synced again when it changed.
const runCacheCheckInterval = 5 * time.Second

// pendingRunCache is the state of a project whose cache has not synced yet
// and has no problem reported: off, but not worth a Warning.
const pendingRunCache = "pending"

// keepRunCaches looks after the AnalysisRun caches until ctx is done, on
// every replica, so that a standby takes over with them warm and reports
// the same availability.
func (c *Controller) keepRunCaches(ctx context.Context) {
	ticker := c.clock.NewTicker(runCacheCheckInterval)
	defer ticker.Stop()
	for {
		c.checkRunCaches(ctx)
		select {
		case <-ctx.Done():
			return
		case <-ticker.C():
		}
	}
}

// checkRunCaches is one look at the AnalysisRun caches.
func (c *Controller) checkRunCaches(ctx context.Context) {
	wanted := c.verifyOnLatchProjects()
	c.adjustProjectCaches(ctx, wanted)
	for ns, state := range c.availabilityChanges(wanted) {
		if state == "" {
			klog.FromContext(ctx).Info("Verify-on-latch is available", "project", ns)
		} else {
			klog.FromContext(ctx).Info("Verify-on-latch is off", "project", ns, "reason", state)
		}
		// Its Stages are judged again with verify-on-latch on or off, and
		// warned or not.
		for _, s := range c.stagesIn(ns) {
			if c.wantsRuns(s) {
				c.enqueue(cache.MetaObjectToName(s))
			}
		}
	}
}

// wantsRuns reports whether a Stage needs verify-on-latch's runs: it opts
// in and has a configured verification.
func (c *Controller) wantsRuns(s *kargo.Stage) bool {
	if !s.HasVerification {
		return false // most Stages: no settings to read
	}
	settings, _ := settingsFor(s.Annotations, c.cfg.Defaults)
	return settings.VerifyOnLatch
}

// verifyOnLatchProjects are the projects with a cached Stage that wants
// verify-on-latch's runs.
func (c *Controller) verifyOnLatchProjects() map[string]bool {
	wanted := map[string]bool{}
	for _, ns := range c.stageNamespaces() {
		if slices.ContainsFunc(c.stagesIn(ns), c.wantsRuns) {
			wanted[ns] = true
		}
	}
	return wanted
}

// adjustProjectCaches makes a cache for each project that wants runs while
// the all-namespaces cache is refused (its rights are bound per project),
// and stops those no longer needed.
func (c *Controller) adjustProjectCaches(ctx context.Context, wanted map[string]bool) {
	r := c.runs
	r.mu.Lock()
	defer r.mu.Unlock()
	all := r.served[metav1.NamespaceAll]
	perProject := all != nil && r.ctx != nil && all.refused.Load() && !r.usable(all)
	for ns, rc := range r.projects {
		if !perProject || !wanted[ns] {
			rc.stop()
			delete(r.projects, ns)
			r.problems.clear(rc.name)
		}
	}
	if !perProject {
		return
	}
	for ns := range wanted {
		if r.projects[ns] != nil {
			continue
		}
		rc, err := c.newRunCache(ns)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Cannot make the AnalysisRun cache of a project", "project", ns)
			continue
		}
		rc.run(r.ctx)
		r.projects[ns] = rc
	}
}

// availabilityChanges reports the availability of each project that wants
// runs on kargo_latch_verify_on_latch_available, forgets the others, and
// returns the projects whose state changed: "" when available, else why not.
func (c *Controller) availabilityChanges(wanted map[string]bool) map[string]string {
	states := make(map[string]string, len(wanted))
	for ns := range wanted {
		why, off := c.verifyOnLatchOff(ns)
		switch {
		case !off:
			states[ns] = ""
		case why == "":
			states[ns] = pendingRunCache
		default:
			states[ns] = why
		}
	}
	gauge := c.cfg.Metrics.VerifyOnLatchAvailable
	r := c.runs
	r.mu.Lock()
	defer r.mu.Unlock()
	changed := map[string]string{}
	for ns, state := range states {
		available := 0.0
		if state == "" {
			available = 1
		}
		gauge.WithLabelValues(ns).Set(available)
		if last, seen := r.state[ns]; !seen || last != state {
			changed[ns] = state
			r.state[ns] = state
		}
	}
	for ns := range r.state {
		if !wanted[ns] {
			delete(r.state, ns)
			gauge.DeleteLabelValues(ns)
		}
	}
	return changed
}

// verifyOnLatchOff reports whether verify-on-latch is off in project ns for
// want of a usable AnalysisRun cache, and why: the diagnosed problem of the
// cache that should serve it, or "" while that one is only not synced yet.
func (c *Controller) verifyOnLatchOff(ns string) (why string, off bool) {
	if c.runCacheFor(ns) != nil {
		return "", false
	}
	r := c.runs
	r.mu.Lock()
	defer r.mu.Unlock()
	rc := r.served[ns]
	if rc == nil {
		rc = r.projects[ns]
	}
	if all := r.served[metav1.NamespaceAll]; rc == nil && all != nil && !all.refused.Load() {
		rc = all // refused, it only waits for the project's cache
	}
	if rc == nil {
		return "", true
	}
	return r.problems.knownOf(rc.name), true
}

// verifyOnLatchAvailability turns verify-on-latch off in the settings of a
// Stage that wants its runs where the operator cannot watch them, so that
// the latch neither starts a run nor waits for one, and warns once per
// problem. It is called where a snapshot's settings are computed
// (snapshotOf).
func (c *Controller) verifyOnLatchAvailability(stage *kargo.Stage, m *memo, settings *latch.Settings) {
	if c.runs == nil || !settings.VerifyOnLatch || !stage.HasVerification {
		return
	}
	why, off := c.verifyOnLatchOff(stage.Namespace)
	if off {
		settings.VerifyOnLatch = false
	}
	c.verifier.ReportUnavailable(stage, &m.verification, why)
}

// ReadyNotes says what /readyz reports beside its verdict without counting
// it: verify-on-latch's problems, which turn verify-on-latch off where they
// concern and leave the operator ready.
func (c *Controller) ReadyNotes() []string {
	if c.runs == nil {
		return nil
	}
	r := c.runs
	r.mu.Lock()
	defer r.mu.Unlock()
	var notes []string
	for ns, rc := range r.served {
		why := r.problems.knownOf(rc.name)
		switch {
		case why == "" || r.usable(rc):
		case ns == metav1.NamespaceAll && rc.refused.Load():
			notes = append(notes, "verify-on-latch watches AnalysisRuns per project, in the projects whose Stages opt in: "+why)
		default:
			notes = append(notes, "verify-on-latch is unavailable: "+why)
		}
	}
	for _, rc := range r.projects {
		if why := r.problems.knownOf(rc.name); why != "" && !r.usable(rc) {
			notes = append(notes, "verify-on-latch is unavailable: "+why)
		}
	}
	slices.Sort(notes)
	return notes
}
