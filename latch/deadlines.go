package latch

import (
	"fmt"
	"time"
)

func (m *machine) checkDeadlines() {
	switch m.rec.Phase {
	case PhasePromoted:
		// Paused (as recorded before this observation: a pause this very
		// failure makes must not undo it), or resumed by this observation:
		// the deadline holds, and counts again from the resume (see
		// trackPauses).
		if len(m.rec.Pauses) > 0 {
			return
		}
		if d := m.settings.LatchDeadline; d > 0 && !m.now.Before(m.deadlineBase().Add(d)) {
			m.fail(ReasonLatchDeadlineExceeded, fmt.Sprintf("Stage was not Healthy within %s of %s", d, m.cycleName()))
		}
	case PhaseDegraded:
		if m.healthJudged() && !m.now.Before(m.rec.DegradedSince.Add(m.grace())) {
			m.fail(ReasonDegraded, fmt.Sprintf("Stage health stayed %s for %s after the latch", describe(m.obs.Health), m.grace()))
		}
	}
}

func (m *machine) grace() time.Duration { return max(0, m.settings.DegradedGrace) }

// deadlineBase is when the latch deadline started counting: the promotion,
// or the moment the operator adopted a cycle it had not seen begin, or the
// last resume.
func (m *machine) deadlineBase() time.Time {
	base := *m.rec.PromotedAt
	for _, t := range []*time.Time{m.rec.AdoptedAt, m.rec.ResumedAt} {
		if t != nil && t.After(base) {
			base = *t
		}
	}
	return base
}
