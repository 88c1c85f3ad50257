package latch

import "time"

// Step advances one Stage's latch record by one observation. It is pure: the
// same arguments always give the same Result, and prior is not modified.
//
// A zero prior ("no record": a Stage never seen, or a record that was
// garbage) is a baseline. The machine records what it sees, counts
// deadlines from now, and reports no failure that happened before it looked,
// so that a first install or a lost record never pauses anything by itself
// (a Stage made, and failed, within the NewFailureWindow while no replica
// led is not a first install: see newFailure).
func Step(s Settings, prior Record, obs Observation, now time.Time) Result {
	m := machine{settings: s, obs: obs, now: now}
	if prior.IsZero() {
		m.baseline()
	} else {
		m.rec = prior.clone()
		m.examinePromotion()
		m.examineVerification()
	}
	m.judgeHealth()
	m.checkDeadlines()
	m.verify()
	m.trackPauses(prior)
	m.markVerified(prior)
	return Result{Record: m.rec, Actions: m.actions, RequeueAfter: m.requeueAfter()}
}

type machine struct {
	settings Settings
	obs      Observation
	now      time.Time
	rec      Record
	actions  []Action
	// runsDue is when a run cut short is due to be terminated.
	runsDue time.Duration
}

func (m *machine) act(a Action) { m.actions = append(m.actions, a) }

func (m *machine) baseline() {
	m.rec = Record{Phase: PhaseIdle}
	lp := m.obs.LastPromotion
	if lp != nil {
		m.rec.ExaminedPromotion = lp.Name
	}
	if v := m.obs.Verification; v.terminal() {
		m.rec.ExaminedVerification = v.ID
	}
	succeeded := lp != nil && lp.Phase == PromotionSucceeded
	if succeeded || m.obs.FreightID != "" {
		if !succeeded {
			lp = nil
		}
		m.beginCycle(lp)
		adopted := m.now
		m.rec.AdoptedAt = &adopted
	}
	// A failure that is already on the Stage when the operator first looks
	// is recorded, but it is not acted on: nobody saw it happen. Unless the
	// promotion failed just now: the Stage was made and failed while no
	// replica led, and that failure is as new as any.
	if reason, msg, ok := promotionFailure(m.obs.LastPromotion); ok && m.newFailure(m.obs.LastPromotion) {
		m.fail(reason, msg)
	} else if ok {
		m.markFailed(reason, msg+" (before kargo-latch watched this Stage)")
	} else if reason, msg, ok := verificationFailure(m.obs.Verification); ok {
		m.markFailed(reason, msg+" (before kargo-latch watched this Stage)")
	}
}

func (m *machine) requeueAfter() time.Duration {
	return Earliest(m.phaseRequeue(), m.verifyRequeue(), m.cutShortRequeue())
}

// Earliest is the soonest of requeue delays, where zero (or less) means
// none: what the machine and the operator both use to say when to look
// again.
func Earliest(delays ...time.Duration) time.Duration {
	var soonest time.Duration
	for _, d := range delays {
		if d > 0 && (soonest == 0 || d < soonest) {
			soonest = d
		}
	}
	return soonest
}

func (m *machine) phaseRequeue() time.Duration {
	switch m.rec.Phase {
	case PhasePromoted:
		if d := m.settings.LatchDeadline; d > 0 && len(m.rec.Pauses) == 0 {
			return m.deadlineBase().Add(d).Sub(m.now)
		}
	case PhaseDegraded:
		if m.healthJudged() {
			return m.rec.DegradedSince.Add(m.grace()).Sub(m.now)
		}
	}
	return 0
}
