package latch

import (
	"fmt"
	"slices"
	"strings"
)

// newFailure reports whether a failed promotion found on a Stage without a
// record is new: the Stage was created, and the promotion finished, within
// the NewFailureWindow.
func (m *machine) newFailure(lp *Promotion) bool {
	w, created := m.settings.NewFailureWindow, m.obs.CreatedWithoutRecord
	return w > 0 && created != nil && m.now.Sub(*created) <= w && lp.FinishedAt != nil && m.now.Sub(*lp.FinishedAt) <= w
}

// examinePromotion starts a cycle on every new successful promotion and
// fails the cycle on a new failed one. A new cycle starts when
// freightHistory[0] moves, too: Kargo replays terminal Promotions in name
// order, so an older Promotion can succeed while lastPromotion stays a newer
// aborted one.
func (m *machine) examinePromotion() {
	lp := m.obs.LastPromotion
	isNew := lp != nil && lp.Name != m.rec.ExaminedPromotion
	if isNew {
		m.rec.ExaminedPromotion = lp.Name
	}
	freightMoved := m.obs.FreightID != "" && m.obs.FreightID != m.rec.FreightID
	switch {
	case isNew && lp.Phase == PromotionSucceeded:
		m.startCycle(lp)
	case freightMoved && m.awaitingOwnFreight():
		m.rec.FreightID, m.rec.Freight = m.obs.FreightID, firstNonEmpty(m.rec.Freight, m.obs.Freight)
	case freightMoved:
		m.startCycle(nil)
	}
	if !isNew {
		return
	}
	if reason, msg, ok := promotionFailure(lp); ok {
		m.fail(reason, msg)
	}
}

// awaitingOwnFreight is true when this cycle began with its promotion but
// Kargo had not yet moved freightHistory[0]; the move that follows belongs to
// the same cycle.
func (m *machine) awaitingOwnFreight() bool {
	lp := m.obs.LastPromotion
	return m.rec.Phase == PhasePromoted && m.rec.Promotion != "" &&
		lp != nil && lp.Name == m.rec.Promotion && lp.Phase == PromotionSucceeded
}

func promotionFailure(lp *Promotion) (FailureReason, string, bool) {
	if lp == nil {
		return "", "", false
	}
	reason, ok := promotionFailureReason(lp.Phase)
	if !ok {
		return "", "", false
	}
	return reason, fmt.Sprintf("Promotion %s %s", lp.Name, strings.ToLower(string(lp.Phase))), true
}

// promotionFailureReason is why a last promotion in phase p fails its
// cycle, if it does: the judgement without the message, which the queue's
// ordering asks on every Stage update.
func promotionFailureReason(p PromotionPhase) (FailureReason, bool) {
	switch p {
	case PromotionFailed:
		return ReasonPromotionFailed, true
	case PromotionErrored:
		return ReasonPromotionErrored, true
	}
	return "", false
}

func (m *machine) startCycle(lp *Promotion) {
	m.beginCycle(lp)
	m.act(Action{Kind: ActionCycleStarted, Message: "new cycle for " + m.cycleName()})
}

// beginCycle resets the record for the promotion lp, or, when lp is nil, for
// a Freight change whose promotion Kargo did not report.
func (m *machine) beginCycle(lp *Promotion) {
	r := &m.rec
	r.Phase = PhasePromoted
	r.FreightID, r.Freight, r.Promotion = m.obs.FreightID, m.obs.Freight, ""
	at := m.now
	if lp != nil {
		r.Promotion, r.Freight = lp.Name, firstNonEmpty(lp.Freight, r.Freight)
		if lp.FinishedAt != nil {
			at = *lp.FinishedAt
		}
	}
	r.PromotedAt = &at
	if a := r.Analysis; a.ByKargoLatch() && a.AdoptedByKargo && !slices.Contains(r.KargosRuns, a.Run) {
		// Kargo follows the run: it stays Kargo's when the cycle ends.
		r.KargosRuns = append([]string{a.Run}, r.KargosRuns[:min(len(r.KargosRuns), MaxKargosRuns-1)]...)
	}
	r.AdoptedAt, r.ResumedAt, r.LatchedAt, r.DegradedSince, r.Failure, r.Verification, r.Analysis = nil, nil, nil, nil, nil, nil, nil
	r.LatchedBy, r.AppsHealthy, r.AppsRecovered, r.Marked = "", nil, nil, nil
}

func (m *machine) cycleName() string {
	switch {
	case m.rec.Promotion != "":
		return "promotion " + m.rec.Promotion
	case m.rec.Freight != "":
		return "freight " + m.rec.Freight
	}
	return "the current freight"
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
