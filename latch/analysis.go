package latch

import (
	"fmt"
	"slices"
	"time"
)

// Analysis is the configured verification of a cycle (the Stage's
// spec.verification, an Argo Rollouts AnalysisRun), kept apart from the
// latch's own health verdict (Record.Verification): a latch is never a
// passed analysis. It mirrors Kargo's VerificationInfo.
type Analysis struct {
	// ID is Kargo's VerificationInfo ID when Kargo verifies; the run's
	// name when kargo-latch started it.
	ID string `json:"id"`
	// Actor is Actor when kargo-latch started the run (verify-on-latch),
	// else KargoActor: Kargo started it and kargo-latch follows it.
	Actor string `json:"actor"`
	// Run names the AnalysisRun, in the Stage's namespace.
	Run string `json:"analysisRun,omitempty"`
	// Phase is the run's phase: empty until an analysis controller picks
	// the run up, then Kargo's verification phases.
	Phase      VerificationPhase `json:"phase,omitempty"`
	StartTime  *time.Time        `json:"startTime,omitempty"`
	FinishTime *time.Time        `json:"finishTime,omitempty"`
	Message    string            `json:"message,omitempty"`
	// Attempt counts the runs kargo-latch started for this cycle: a run
	// someone deleted is started again once.
	Attempt int `json:"attempt,omitempty"`
	// AdoptedByKargo: Kargo's own status now follows kargo-latch's run.
	AdoptedByKargo bool `json:"adoptedByKargo,omitempty"`
	// PickupReported: the run showed no phase past VerifyPickupTimeout, and
	// that was reported.
	PickupReported bool `json:"pickupReported,omitempty"`
	// AbortRequested is the id of Kargo's verification of this run that
	// kargo-latch asked Kargo to abort (kargo.akuity.io/abort on the Stage),
	// once: Kargo adopted the run, so only Kargo may end it.
	AbortRequested string `json:"abortRequested,omitempty"`
}

// KargoActor is the Analysis actor of a verification Kargo started.
const KargoActor = "kargo"

// LeftToKargoMessage says why kargo-latch starts no run for a Stage that
// carries Kargo's reverify token.
const LeftToKargoMessage = "the Stage carries kargo.akuity.io/reverify, so Kargo's next Healthy pass skips its lookup and starts a run of its own " +
	"(Kargo never removes that token): the start is left to Kargo; remove the annotation to let kargo-latch verify on latch"

// LeftToKargo reports whether the analysis is only the note that the start
// was left to Kargo, with no verification of Kargo's yet.
func (a *Analysis) LeftToKargo() bool {
	return a != nil && a.Actor == KargoActor && a.ID == "" && a.Message == LeftToKargoMessage
}

// ByKargoLatch reports whether kargo-latch started the analysis.
func (a *Analysis) ByKargoLatch() bool { return a != nil && a.Actor == Actor }

// Terminal reports whether the analysis has a result.
func (a *Analysis) Terminal() bool {
	return a != nil && a.Phase != "" && a.Phase != VerificationPending && a.Phase != VerificationRunning
}

// Run is an AnalysisRun as verify-on-latch sees it.
type Run struct {
	Name string
	// Collection is the run's kargo.akuity.io/freight-collection label.
	Collection string
	// Ours: the run carries kargo-latch's marker (kargo-latch made it).
	Ours    bool
	Created time.Time
	// Phase is status.phase: empty until an analysis controller picks the
	// run up.
	Phase      VerificationPhase
	Message    string
	StartedAt  *time.Time
	FinishedAt *time.Time
	// Terminating: spec.terminate is set.
	Terminating bool
	// CutShort says why kargo-latch took the run out of Kargo's lookup
	// (its kargo-latch.io/cut-short annotation), and CutShortAt when; empty
	// while the run is in the lookup.
	CutShort   string
	CutShortAt *time.Time
}

// Terminal reports whether the run shows a result.
func (r Run) Terminal() bool {
	switch r.Phase {
	case VerificationSuccessful, VerificationFailed, VerificationError, VerificationInconclusive:
		return true
	}
	return false
}

// KnownRunPhase reports whether p is a phase Argo Rollouts gives an
// AnalysisRun (or none yet). Any other string is garbage: it is neither a
// result nor a failure, and the run is followed on.
func KnownRunPhase(p VerificationPhase) bool {
	switch p {
	case "", VerificationPending, VerificationRunning, VerificationSuccessful, VerificationFailed, VerificationError, VerificationInconclusive:
		return true
	}
	return false
}

// verify looks after the cycle's configured verification: it terminates
// kargo-latch's runs that no cycle needs any more, follows the
// verification of the current cycle (Kargo's own, or kargo-latch's run),
// and, with verify-on-latch, starts the run Kargo would start once the
// cycle has latched and Kargo has not started one within the grace.
func (m *machine) verify() {
	// Stray runs are judged last, on the record as this Step leaves it: a
	// run this cycle adopts is never stray.
	defer m.endStrayRuns()
	if !m.settings.VerifyOnLatch || !m.obs.HasVerification || m.rec.FreightID == "" || m.obs.FreightID != m.rec.FreightID {
		return
	}
	switch a := m.rec.Analysis; {
	case a == nil:
		m.beginAnalysis()
	case a.LeftToKargo() && !m.obs.Reverify && (m.obs.Verification == nil || m.obs.Verification.ID == ""):
		// The reverify token is gone before Kargo started anything: the
		// start is kargo-latch's again.
		m.rec.Analysis = nil
		m.beginAnalysis()
	case a.ByKargoLatch() && m.kargoVerifiesAnother(a):
		// Kargo started its own verification after all (its lookup and
		// kargo-latch's create crossed, or a reverify): Kargo's decides,
		// and kargo-latch's run, no longer the cycle's, is terminated.
		m.rec.Analysis = &Analysis{ID: m.obs.Verification.ID, Actor: KargoActor}
		m.followKargo(m.rec.Analysis)
	case a.ByKargoLatch():
		m.followOwnRun(a)
	default:
		m.followKargo(a)
	}
}

// kargoVerifiesAnother reports whether Kargo's status shows a verification
// of the collection that follows another run than kargo-latch's a.
func (m *machine) kargoVerifiesAnother(a *Analysis) bool {
	v := m.obs.Verification
	return v != nil && v.ID != "" && v.Run != "" && v.Run != a.Run
}

// beginAnalysis finds the cycle's verification once it has latched: Kargo's
// own, shown in its status or by a run its lookup would find, or
// kargo-latch's own run of this cycle, made before a crash; failing those,
// and once Kargo has had its grace, it asks to start one.
func (m *machine) beginAnalysis() {
	if m.rec.Phase != PhaseLatched || m.rec.LatchedAt == nil || !m.healthJudged() || !m.ownFreightShown() {
		return
	}
	if v := m.obs.Verification; v != nil && v.ID != "" {
		m.rec.Analysis = &Analysis{ID: v.ID, Actor: KargoActor}
		m.followKargo(m.rec.Analysis)
		return
	}
	name := RunName(m.obs.Stage, m.rec.FreightID, m.rec.Cycle(), 1)
	if r, ok := m.runFor(name); ok {
		m.adoptRun(r)
		return
	}
	if m.obs.StartRefused || m.now.Before(m.rec.LatchedAt.Add(m.settings.VerifyGrace)) {
		return
	}
	if m.obs.Reverify {
		m.rec.Analysis = &Analysis{Actor: KargoActor, Message: LeftToKargoMessage}
		m.act(Action{Kind: ActionVerificationLeftToKargo, Message: "not starting the verification of " + m.cycleName() + ": " + LeftToKargoMessage})
		return
	}
	m.startRun(name, 1, "the cycle latched and Kargo started no verification within "+m.settings.VerifyGrace.String())
}

// runFor finds the run to adopt for this cycle: kargo-latch's own of this
// name, else the newest run Kargo's lookup would find for the collection
// (Kargo adopts the newest too).
func (m *machine) runFor(name string) (Run, bool) {
	var found *Run
	for i, r := range m.obs.Runs {
		switch {
		case r.Ours && r.Name == name:
			return r, true
		case !r.Ours && r.Collection == m.rec.FreightID && (found == nil || r.Created.After(found.Created)):
			found = &m.obs.Runs[i]
		}
	}
	if found == nil {
		return Run{}, false
	}
	return *found, true
}

func (m *machine) adoptRun(r Run) {
	if !r.Ours {
		m.rec.Analysis = &Analysis{ID: r.Name, Actor: KargoActor, Run: r.Name, Phase: r.Phase}
		return
	}
	start := r.Created
	m.rec.Analysis = &Analysis{ID: r.Name, Actor: Actor, Run: r.Name, Attempt: 1, StartTime: &start}
	m.act(Action{Kind: ActionVerificationStarted, Run: r.Name, Message: "AnalysisRun " + r.Name + " verifies " + m.cycleName()})
	m.followOwnRun(m.rec.Analysis)
}

// startRun records the run it asks for: the operator makes it before it
// stores the record, so a stored record never names a run never made.
func (m *machine) startRun(name string, attempt int, why string) {
	now := m.now
	m.rec.Analysis = &Analysis{ID: name, Actor: Actor, Run: name, Attempt: attempt, StartTime: &now}
	m.act(Action{Kind: ActionStartVerification, Run: name, Message: why})
	m.act(Action{Kind: ActionVerificationStarted, Run: name, Message: "AnalysisRun " + name + " verifies " + m.cycleName() + ": " + why})
}

// followOwnRun mirrors kargo-latch's run into the record, and judges its
// result: Successful lets the cycle's Freight be marked; Failed, Error and
// Inconclusive fail the cycle, as Kargo's own verification would. A run
// ended before its result (cut short, or terminated by anyone) is Aborted:
// never a pass, and never a failure.
func (m *machine) followOwnRun(a *Analysis) {
	v := m.obs.Verification
	kargoFollows := v != nil && v.Run == a.Run && a.Run != ""
	if kargoFollows {
		a.AdoptedByKargo = true
	}
	if a.Terminal() {
		return
	}
	if kargoFollows && v.terminal() {
		// Kargo's verdict, not the run's phase: an abort in Kargo leaves
		// a Successful run behind (Kargo records Failed itself). A run
		// someone terminated behind Kargo's back is no pass either.
		end := kargosVerdict(v)
		if i := slices.IndexFunc(m.obs.Runs, func(r Run) bool { return r.Name == a.Run }); i >= 0 && m.obs.Runs[i].Terminating && end.phase == VerificationSuccessful {
			end = ownRunEnd{phase: VerificationAborted, message: "terminated by someone (spec.terminate) while Kargo followed it: Kargo recorded Successful, which is no result"}
		}
		m.finishOwnRun(a, end)
		return
	}
	i := slices.IndexFunc(m.obs.Runs, func(r Run) bool { return r.Name == a.Run })
	if i < 0 {
		if m.obs.RunGone == a.Run {
			m.runDeleted(a)
		}
		return
	}
	r := m.obs.Runs[i]
	if r.StartedAt != nil {
		a.StartTime = r.StartedAt
	}
	switch {
	case r.CutShort != "":
		m.finishOwnRun(a, ownRunEnd{phase: VerificationAborted, message: withDetail("cut short by kargo-latch", r.CutShort), at: r.CutShortAt})
		return
	case r.Terminating && !kargoFollows:
		m.finishOwnRun(a, ownRunEnd{phase: VerificationAborted, message: "terminated by someone other than kargo-latch (spec.terminate): no result", at: r.FinishedAt})
		return
	case !KnownRunPhase(r.Phase) || (r.Terminating && kargoFollows):
		// Garbage (reported by the operator as it reads it), or a run
		// Kargo follows that is being terminated: Kargo records the
		// verdict, not the run.
		return
	case r.Phase == "" || r.Phase == VerificationPending:
		if !a.PickupReported && a.StartTime != nil && !m.now.Before(a.StartTime.Add(m.settings.VerifyPickupTimeout)) && r.Phase == "" {
			a.PickupReported = true
			m.act(Action{Kind: ActionVerificationNotPickedUp, Run: a.Run,
				Message: fmt.Sprintf("AnalysisRun %s shows no phase %s after it was made: no Argo Rollouts analysis controller has picked it up", a.Run, m.settings.VerifyPickupTimeout)})
		}
		a.Phase = r.Phase
		return
	}
	a.Phase, a.Message = r.Phase, bounded(r.Message)
	if r.Terminal() {
		m.finishOwnRun(a, ownRunEnd{phase: r.Phase, message: r.Message, at: r.FinishedAt})
	}
}

// ownRunEnd is how kargo-latch's run of the cycle ended.
type ownRunEnd struct {
	phase   VerificationPhase
	message string
	at      *time.Time
}

// kargosVerdict is the end of kargo-latch's run that Kargo adopted, as
// Kargo records it: a person's abort (or kargo-latch's request) is an abort.
func kargosVerdict(v *Verification) ownRunEnd {
	if v.Phase == VerificationFailed && v.Message == UserAbortMessage {
		by := "aborted in Kargo"
		if v.Actor != "" {
			by += " by " + v.Actor
		}
		return ownRunEnd{phase: VerificationAborted, message: by}
	}
	return ownRunEnd{phase: v.Phase, message: withDetail("as Kargo recorded it", v.Message)}
}

// finishOwnRun records the end of kargo-latch's run of the cycle and
// judges it.
func (m *machine) finishOwnRun(a *Analysis, end ownRunEnd) {
	finish := m.now
	if end.at != nil {
		finish = *end.at
	}
	a.Phase, a.Message, a.FinishTime = end.phase, bounded(end.message), &finish
	done := Action{Kind: ActionVerificationFinished, Run: a.Run, Phase: a.Phase,
		Message: withDetail(fmt.Sprintf("AnalysisRun %s of %s: %s", a.Run, m.cycleName(), a.Phase), a.Message)}
	if m.rec.LatchedAt != nil {
		done.TimeToResult = max(0, finish.Sub(*m.rec.LatchedAt))
	}
	m.act(done)
	if reason, ok := analysisFailure(a.Phase); ok {
		m.fail(reason, done.Message)
	}
}

// analysisFailure maps a run's result onto the cycle's failure.
func analysisFailure(p VerificationPhase) (FailureReason, bool) {
	switch p {
	case VerificationFailed:
		return ReasonVerificationFailed, true
	case VerificationError:
		return ReasonVerificationError, true
	case VerificationInconclusive:
		return ReasonVerificationInconclusive, true
	}
	return "", false
}

// runDeleted handles a run someone deleted before its result: it is started
// again once, under the next attempt's name; a second deletion is taken as
// an abort, reported, and never a failure.
func (m *machine) runDeleted(a *Analysis) {
	if a.Attempt < 2 {
		m.act(Action{Kind: ActionVerificationRunDeleted, Run: a.Run, Message: "AnalysisRun " + a.Run + " was deleted before its result; starting it again once"})
		m.startRun(RunName(m.obs.Stage, m.rec.FreightID, m.rec.Cycle(), a.Attempt+1), a.Attempt+1, "AnalysisRun "+a.Run+" was deleted")
		return
	}
	now := m.now
	a.Phase, a.FinishTime, a.Message = VerificationAborted, &now, "AnalysisRun deleted again before its result; kargo-latch starts no more runs for this cycle"
	m.act(Action{Kind: ActionVerificationRunDeleted, Run: a.Run, Message: "AnalysisRun " + a.Run + " was deleted again before its result; no more runs are started for " + m.cycleName()})
}

// followKargo mirrors Kargo's own verification of the cycle. Its failures
// are judged from Kargo's status (examineVerification), as they were before
// verify-on-latch.
func (m *machine) followKargo(a *Analysis) {
	v := m.obs.Verification
	if v == nil || v.ID == "" {
		return
	}
	if v.ID != a.ID && a.ID != a.Run {
		// A new verification (a reverify, say) replaces the one followed.
		*a = Analysis{ID: v.ID, Actor: KargoActor}
	}
	a.ID, a.Phase, a.Message = v.ID, v.Phase, bounded(v.Message)
	if v.Run != "" {
		a.Run = v.Run
	}
}

// ownFreightShown reports whether Kargo's status shows the cycle's own
// Freight: right after a promotion, freightHistory[0] may still be the
// previous Freight's.
func (m *machine) ownFreightShown() bool {
	if m.obs.FreightID == "" || m.obs.FreightID != m.rec.FreightID {
		return false
	}
	lp := m.obs.LastPromotion
	return lp == nil || lp.Freight == "" || slices.Contains(m.obs.FreightNames, lp.Freight)
}

// verifyRequeue says when a time-based step of verify-on-latch is due: the
// end of Kargo's grace, or of the pickup timeout.
func (m *machine) verifyRequeue() time.Duration {
	if !m.settings.VerifyOnLatch || !m.obs.HasVerification || m.rec.Phase != PhaseLatched || m.rec.LatchedAt == nil {
		return 0
	}
	switch a := m.rec.Analysis; {
	case a == nil && !m.obs.StartRefused:
		return max(0, m.rec.LatchedAt.Add(m.settings.VerifyGrace).Sub(m.now))
	case a.ByKargoLatch() && a.Phase == "" && !a.PickupReported && a.StartTime != nil:
		return max(0, a.StartTime.Add(m.settings.VerifyPickupTimeout).Sub(m.now))
	}
	return 0
}
