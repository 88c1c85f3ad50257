package latch

import "time"

// MaxKargosRuns bounds Record.KargosRuns.
const MaxKargosRuns = 4

// A run kargo-latch ends before its result must never pass in Kargo. Argo
// Rollouts ends a terminated run Successful when no measurement has failed
// yet (kargo-api-facts.md §13.1), and Kargo adopts the newest run carrying
// its two lookup labels with the phase it shows (§12.2). So kargo-latch
// ends a run of its own in two steps:
//
//  1. cut short: the run leaves Kargo's lookup (its labels move under
//     kargo-latch's own keys, with why and when) and goes on measuring: a
//     result it reaches is a true one, should Kargo have adopted it in the
//     meantime;
//  2. terminate: TerminateAfter later, if Kargo's status, read live, does
//     not follow it, spec.terminate stops it.
//
// A run Kargo follows is Kargo's: kargo-latch never patches it, and to end
// it asks Kargo, with Kargo's own abort token on the Stage, which makes
// Kargo record Failed itself (§13.4).

// endStrayRuns ends each run of kargo-latch's for this Stage that no live
// analysis needs: one of a superseded cycle, one of a cycle that failed,
// or one someone else terminated (its Successful would be no result).
func (m *machine) endStrayRuns() {
	a := m.rec.Analysis
	for _, r := range m.obs.Runs {
		if !r.Ours || m.kargos(r.Name) {
			continue
		}
		// A run someone else terminated, still in Kargo's lookup, is or
		// will be Successful without being a result.
		terminatedByOthers := r.Terminating && r.CutShort == ""
		if r.Terminal() && !terminatedByOthers {
			continue
		}
		current := a.ByKargoLatch() && a.Run == r.Name
		if !current && a == nil && m.rec.Phase != PhaseFailed && m.ownUnrecordedRun(r.Name) {
			// This cycle's run, made before a crash and not yet adopted
			// (beginAnalysis adopts it once the cycle is Latched again).
			continue
		}
		var why string
		switch {
		case !current && r.Collection != "" && r.Collection == m.rec.FreightID && a != nil && a.Actor == KargoActor:
			why = "Kargo verifies this Freight collection with a run of its own"
		case !current:
			why = "the cycle it verifies was superseded by " + m.cycleName()
		case m.rec.Phase == PhaseFailed:
			why = "the cycle it verifies failed (" + string(m.rec.Failure.Reason) + ")"
		case terminatedByOthers:
			why = "spec.terminate was set by someone other than kargo-latch: a terminated run ends Successful, which is no result"
		default:
			continue
		}
		if v := m.obs.Verification; v != nil && v.Run == r.Name {
			if current && m.rec.Phase == PhaseFailed {
				m.abortInKargo(a, v, why)
			}
			continue
		}
		switch {
		case r.CutShort == "":
			m.act(Action{Kind: ActionCutShortRun, Run: r.Name, Message: why})
		case r.Terminating || r.Terminal() || r.CutShortAt == nil:
			// Without a readable time it was cut short, it is never
			// terminated: out of the lookup, it can only end in a true
			// result.
		case !m.now.Before(r.CutShortAt.Add(m.terminateAfter())):
			m.act(Action{Kind: ActionTerminateRun, Run: r.Name,
				Message: "terminating AnalysisRun " + r.Name + ", cut short by kargo-latch: " + r.CutShort})
		default:
			m.runsDue = Earliest(m.runsDue, r.CutShortAt.Add(m.terminateAfter()).Sub(m.now))
		}
	}
}

// ownUnrecordedRun reports whether run bears one of this cycle's run names.
func (m *machine) ownUnrecordedRun(run string) bool {
	if m.rec.FreightID == "" || m.obs.Stage == "" {
		return false
	}
	for attempt := 1; attempt <= 2; attempt++ {
		if run == RunName(m.obs.Stage, m.rec.FreightID, m.rec.Cycle(), attempt) {
			return true
		}
	}
	return false
}

// kargos reports whether run is one Kargo adopted in an earlier cycle.
func (m *machine) kargos(run string) bool {
	for _, r := range m.rec.KargosRuns {
		if r == run {
			return true
		}
	}
	return false
}

// abortInKargo asks Kargo, once, to abort its verification v, which
// follows kargo-latch's run of this failed cycle.
func (m *machine) abortInKargo(a *Analysis, v *Verification, why string) {
	if v.terminal() || v.ID == "" || m.obs.AbortRequested == v.ID || a.AbortRequested == v.ID {
		return
	}
	a.AbortRequested = v.ID
	m.act(Action{Kind: ActionAbortInKargo, Run: v.Run, VerificationID: v.ID,
		Message: "asking Kargo to abort its verification " + v.ID + " (AnalysisRun " + v.Run + ", adopted by Kargo): " + why})
}

// terminateAfter is how long a run cut short waits before it is
// terminated: long enough for a lookup of Kargo's that listed the run just
// before it left to show in Kargo's status (never less than Kargo's grace).
func (m *machine) terminateAfter() time.Duration {
	return max(m.settings.TerminateAfter, m.settings.VerifyGrace)
}

// cutShortRequeue says when a run cut short is due to be terminated.
func (m *machine) cutShortRequeue() time.Duration { return m.runsDue }
