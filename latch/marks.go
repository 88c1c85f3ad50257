package latch

import (
	"fmt"
	"slices"
	"time"
)

// markVerified asks to mark the cycle's Freight verified in the Stage, as
// Kargo does in a pass that sees the Stage Healthy, so that the Freight
// flows downstream. It asks only when the latch is already stored (prior is
// Latched in this same cycle), so that verifiedAt is the stored latchedAt
// whatever happens to the mark; and once per cycle and Freight: the record
// names the Freight asked for, and the operator marks them before it stores
// the record.
func (m *machine) markVerified(prior Record) {
	if !m.obs.MayMark || prior.Phase != PhaseLatched || prior.Cycle() != m.rec.Cycle() {
		return
	}
	m.askMark()
}

// MarkDue reports whether the Freight of rec's cycle should be marked
// verified now, as far as obs shows: the operator then reads the Stage and
// its pauses from the API server and steps again with MayMark, so that a
// mark, which is never taken back, is never made from a stale view.
func MarkDue(s Settings, rec Record, obs Observation, now time.Time) bool {
	// Every sync asks; most Stages answer here, without a second Step.
	if !s.MarkVerified || rec.Phase != PhaseLatched {
		return false
	}
	obs.MayMark = true
	for _, a := range Step(s, rec, obs, now).Actions {
		if a.Kind == ActionMarkVerified {
			return true
		}
	}
	return false
}

func (m *machine) askMark() {
	if !m.settings.MarkVerified || !m.markable() {
		return
	}
	var todo []string
	for _, f := range m.obs.FreightNames {
		if f != "" && !slices.Contains(m.rec.Marked, f) {
			todo = append(todo, f)
		}
	}
	if len(todo) == 0 || len(m.rec.Marked)+len(todo) > MaxApps {
		return
	}
	m.rec.Marked = append(m.rec.Marked, todo...)
	why := "the Stage was Healthy"
	if m.rec.LatchedBy == LatchedByApps {
		why = "every Application was Healthy in this cycle"
	}
	m.act(Action{Kind: ActionMarkVerified, Freight: todo, VerifiedAt: *m.rec.LatchedAt,
		Message: fmt.Sprintf("%s latched (%s)", m.cycleName(), why)})
}

// markable reports whether the cycle may count as verified now: it is
// Latched (not Degraded, not Failed) in a pass where Kargo judges health, the
// observation is of the cycle's own Freight, no pause covers the Stage (a
// person who stopped the line here also stops what flows out), and a
// configured verification has succeeded: kargo-latch never replaces a
// verification, it only gives a successful one the Healthy pass Kargo needs.
func (m *machine) markable() bool {
	if m.rec.Phase != PhaseLatched || m.rec.LatchedAt == nil || !m.healthJudged() ||
		len(m.obs.Pauses) > 0 || m.obs.FreightID == "" || m.obs.FreightID != m.rec.FreightID {
		return false
	}
	// The promotion's own Freight must be the one Kargo shows: right after
	// a promotion, freightHistory[0] may still be the previous Freight's.
	if lp := m.obs.LastPromotion; lp.Freight != "" && !slices.Contains(m.obs.FreightNames, lp.Freight) {
		return false
	}
	if m.obs.HasVerification {
		v := m.obs.Verification
		return v != nil && v.Phase == VerificationSuccessful
	}
	return true
}
