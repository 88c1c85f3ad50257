package latch

import (
	"slices"
	"time"
)

// appsJudged reports whether this observation may count Applications as
// Healthy: health is judged, and Kargo's aggregate is Healthy or merely
// Progressing. An aggregate Unhealthy or Unknown means Kargo found something
// wrong (a wrong revision, say) that an App's own status may not show. The
// output must have exactly one entry per health check the last promotion
// left: the Apps listed are then all that Kargo checks. No recorded checks
// (a Kargo that does not record them, or a Stage status written by hand)
// and more entries than checks both leave that unknown, so they fail
// closed: only the aggregate rule applies.
func (m *machine) appsJudged() bool {
	h := m.obs.Health
	return m.healthJudged() && (h == HealthHealthy || h == HealthProgressing) &&
		len(m.obs.Apps) > 0 && len(m.obs.Apps) <= MaxApps &&
		m.obs.HealthChecks > 0 && m.obs.HealthOutputs == m.obs.HealthChecks
}

// trackApps records in seen each Application seen Healthy and Synced, with
// the first time it was seen so.
func (m *machine) trackApps(seen *map[string]time.Time) {
	if !m.appsJudged() {
		return
	}
	// An App the Stage no longer lists no longer counts; forgetting it also
	// keeps the record within MaxApps however the list changes.
	for key := range *seen {
		if !slices.ContainsFunc(m.obs.Apps, func(a App) bool { return a.Key() == key }) {
			delete(*seen, key)
		}
	}
	for _, a := range m.obs.Apps {
		if !a.counts() {
			continue
		}
		if _, ok := (*seen)[a.Key()]; ok {
			continue
		}
		if *seen == nil {
			*seen = map[string]time.Time{}
		}
		(*seen)[a.Key()] = m.now
	}
}

// everyApp reports whether every Application listed now is in seen, each
// seen Healthy at its own moment: apps that flap out of phase are never
// Healthy together, yet each has shown that the promotion works.
func (m *machine) everyApp(seen map[string]time.Time) bool {
	if !m.appsJudged() {
		return false
	}
	for _, a := range m.obs.Apps {
		if _, ok := seen[a.Key()]; !ok {
			return false
		}
	}
	return true
}
