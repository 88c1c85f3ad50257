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
	msg, at := fmt.Sprintf("%s latched (%s)", m.cycleName(), why), *m.rec.LatchedAt
	if a := m.rec.Analysis; a.ByKargoLatch() && a.Phase == VerificationSuccessful && a.FinishTime != nil {
		// As Kargo marks a verified Freight: at the verification's finish.
		msg, at = fmt.Sprintf("%s latched (%s) and its AnalysisRun %s succeeded", m.cycleName(), why, a.Run), *a.FinishTime
	}
	m.act(Action{Kind: ActionMarkVerified, Freight: todo, VerifiedAt: at, Message: msg})
}

// markable reports whether the cycle may count as verified now: it is
// Latched (not Degraded, not Failed) in a pass where Kargo judges health, the
// observation is of the cycle's own Freight, no pause covers the Stage (a
// person who stopped the line here also stops what flows out), and a
// configured verification has succeeded: kargo-latch never replaces a
// verification, it only gives a successful one the Healthy pass Kargo needs.
func (m *machine) markable() bool {
	if m.rec.Phase != PhaseLatched || m.rec.LatchedAt == nil || !m.healthJudged() ||
		len(m.obs.Pauses) > 0 || !m.ownFreightShown() {
		return false
	}
	if m.obs.HasVerification {
		// Kargo's own verification of the collection, when its status
		// shows one, decides (it may follow kargo-latch's run).
		if v := m.obs.Verification; v != nil && v.ID != "" {
			return v.Phase == VerificationSuccessful
		}
		// With verify-on-latch: the run kargo-latch started for this cycle.
		a := m.rec.Analysis
		return m.settings.VerifyOnLatch && a.ByKargoLatch() && a.Phase == VerificationSuccessful
	}
	return true
}
