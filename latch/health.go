package latch

import "fmt"

// healthJudged reports whether Kargo's health means anything now. While a
// promotion runs, or after one that did not succeed, Kargo reports Unknown by
// construction, so the phase holds; so it does for a health string Kargo
// does not define.
func (m *machine) healthJudged() bool {
	lp := m.obs.LastPromotion
	return lp != nil && lp.Phase == PromotionSucceeded && !m.obs.PromotionRunning && !m.obs.HealthInvalid
}

func (m *machine) judgeHealth() {
	if !m.healthJudged() {
		return
	}
	h := m.obs.Health
	switch m.rec.Phase {
	case PhasePromoted:
		m.trackApps(&m.rec.AppsHealthy)
		switch {
		case h == HealthHealthy:
			m.latch(LatchedByStage)
		case m.everyApp(m.rec.AppsHealthy):
			m.latch(LatchedByApps)
		}
	case PhaseLatched:
		switch {
		case h == HealthProgressing:
			if m.obs.PreviousHealth != HealthProgressing {
				m.act(Action{Kind: ActionProgressingIgnored, Message: "Stage is Progressing; the latch holds"})
			}
		case h.keepsLatch():
		default:
			since := m.now
			m.rec.Phase, m.rec.DegradedSince, m.rec.AppsRecovered = PhaseDegraded, &since, nil
			m.act(Action{Kind: ActionDegraded, Message: fmt.Sprintf("Stage health is %s after the latch", describe(h))})
		}
	case PhaseDegraded:
		// A Stage recovers as it latched: Healthy as a whole, or every App
		// Healthy again, each at its own moment. Apps that flap out of
		// phase keep the Stage from ever being Healthy as a whole, and
		// without the second rule one blip would fail it past the grace.
		m.trackApps(&m.rec.AppsRecovered)
		switch {
		case h == HealthHealthy || h == HealthNotApplicable:
			m.recover(fmt.Sprintf("Stage health is %s again", h))
		case m.everyApp(m.rec.AppsRecovered):
			m.recover(fmt.Sprintf("every Application (%d) was Healthy again", len(m.obs.Apps)))
		}
	}
}

func (m *machine) recover(msg string) {
	m.rec.Phase, m.rec.DegradedSince, m.rec.AppsRecovered = PhaseLatched, nil, nil
	m.act(Action{Kind: ActionRecovered, Message: msg})
}

func (m *machine) latch(by string) {
	at := m.now
	m.rec.Phase, m.rec.LatchedAt, m.rec.LatchedBy = PhaseLatched, &at, by
	if by == LatchedByStage {
		// The Apps' own times did not form this latch; the record, kept in
		// every replica's cache, stays small.
		m.rec.AppsHealthy = nil
	}
	msg := "Stage became Healthy after " + m.cycleName()
	if by == LatchedByApps {
		msg = fmt.Sprintf("every Application (%d) was Healthy after %s", len(m.obs.Apps), m.cycleName())
	}
	m.pushVerification(VerificationSuccessful, *m.rec.PromotedAt, msg)
	a := Action{Kind: ActionLatched, Message: msg}
	if m.rec.AdoptedAt == nil {
		a.TimeToLatch = max(0, m.now.Sub(*m.rec.PromotedAt))
	}
	m.act(a)
}

func describe(h Health) string {
	if h == HealthMissing {
		return "missing"
	}
	return string(h)
}
