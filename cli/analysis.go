package cli

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// A Stage with spec.verification has its Freight verified by an analysis
// (an Argo Rollouts AnalysisRun): Kargo's own, or, with verify-on-latch,
// the one kargo-latch starts once the cycle has latched and Kargo has not.
// status and wait say who verifies the current cycle and how far it has
// got, apart from the latch: a latch is a verdict on health, never a
// passed analysis.

// defaultVerifyGrace is the operator's default --verify-grace: how long
// after a latch Kargo is given to start its own verification before
// kargo-latch starts it. The CLI cannot read the operator's flags; within
// this long after the latch, status says "waiting for Kargo".
const defaultVerifyGrace = 10 * time.Second

// AnalysisStatus is the configured verification of a Stage's current
// cycle, in `status -o json|yaml` and for wait.
type AnalysisStatus struct {
	// VerifyOnLatch: the Stage opts into verify-on-latch
	// (kargo-latch.io/verify-on-latch).
	VerifyOnLatch bool `json:"verifyOnLatch"`
	// By is who verifies the cycle: "kargo-latch" (its own AnalysisRun,
	// verify-on-latch) or "kargo" (Kargo's own verification); empty while
	// no verification of the cycle exists.
	By string `json:"by,omitempty"`
	// Phase is the analysis's phase (Pending, Running, Successful, Failed,
	// Error, Inconclusive, Aborted); empty until an Argo Rollouts analysis
	// controller has picked the run up.
	Phase       string     `json:"phase,omitempty"`
	AnalysisRun string     `json:"analysisRun,omitempty"`
	Message     string     `json:"message,omitempty"`
	StartTime   *time.Time `json:"startTime,omitempty"`
	FinishTime  *time.Time `json:"finishTime,omitempty"`
	// AdoptedByKargo: Kargo's own status follows kargo-latch's run.
	AdoptedByKargo bool `json:"adoptedByKargo,omitempty"`
	// NotPickedUp: kargo-latch's run showed no phase past the operator's
	// --verify-pickup-timeout: no analysis controller has taken it.
	NotPickedUp bool `json:"notPickedUp,omitempty"`
	// LeftToKargo: the Stage carries Kargo's reverify token, so
	// kargo-latch starts no run and Kargo starts its own when it sees the
	// Stage Healthy.
	LeftToKargo bool `json:"leftToKargo,omitempty"`
}

// verifyOnLatch reads the Stage's verify-on-latch setting as the operator
// does: a value that does not parse is the default, off.
func verifyOnLatch(annotations map[string]string) bool {
	on, err := strconv.ParseBool(strings.TrimSpace(annotations[api.VerifyOnLatchAnnotation]))
	return err == nil && on
}

// hasVerification reports whether the Stage has spec.verification.
func hasVerification(u *unstructured.Unstructured) bool {
	v, found, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "verification")
	return found && v != nil
}

// cycleAnalysis is the configured verification of the record's cycle, as
// far as the record (kargo-latch's run, or Kargo's that it follows) and
// Kargo's status show it; nil when the Stage has no spec.verification.
// rec may be nil or zero (no record): Kargo's status alone then tells.
func cycleAnalysis(u *unstructured.Unstructured, rec *latch.Record, st *kargo.StageStatus) *AnalysisStatus {
	if !hasVerification(u) {
		return nil
	}
	a := &AnalysisStatus{VerifyOnLatch: verifyOnLatch(u.GetAnnotations())}
	var own *latch.Analysis
	if rec != nil && rec.Analysis != nil && (st == nil || st.FreightID == "" || st.FreightID == rec.FreightID) {
		own = rec.Analysis
	}
	kv := kargoVerification(rec, st)
	switch {
	case own.ByKargoLatch() && (kv == nil || kv.Run == own.Run):
		// kargo-latch's run; Kargo's status, if any, follows the same run.
		a.fromRecord(own)
	case kv != nil:
		// Kargo's own verification, or a newer one of Kargo's (a reverify)
		// after kargo-latch's run ended.
		a.By, a.Phase, a.AnalysisRun, a.Message = latch.KargoActor, kv.Phase, kv.Run, kv.Message
		if own != nil && own.Actor == latch.KargoActor && own.ID == kv.ID {
			a.StartTime, a.FinishTime = own.StartTime, own.FinishTime
		}
	case own != nil:
		a.fromRecord(own)
	}
	return a
}

func (a *AnalysisStatus) fromRecord(r *latch.Analysis) {
	a.By, a.Phase, a.AnalysisRun, a.Message = r.Actor, string(r.Phase), r.Run, r.Message
	a.StartTime, a.FinishTime = r.StartTime, r.FinishTime
	a.AdoptedByKargo, a.NotPickedUp, a.LeftToKargo = r.AdoptedByKargo, r.PickupReported && r.Phase == "", r.LeftToKargo()
}

// kargoVerification is Kargo's verification (freightHistory[0]'s newest)
// when it is of the record's cycle: of its Freight collection, and not
// shown beside another promotion's (right after a promotion, Kargo may
// still show the previous one's).
func kargoVerification(rec *latch.Record, st *kargo.StageStatus) *kargo.VerificationInfo {
	if st == nil || st.Verification == nil || st.Verification.ID == "" {
		return nil
	}
	if rec == nil || rec.IsZero() || rec.Phase == latch.PhaseIdle {
		return st.Verification
	}
	if st.FreightID != rec.FreightID {
		return nil
	}
	if lp := st.LastPromotion; lp != nil && rec.Promotion != "" && lp.Name != rec.Promotion {
		return nil
	}
	return st.Verification
}

// Analysis outcomes, as wait judges them.

// succeeded reports whether the analysis passed.
func (a *AnalysisStatus) succeeded() bool {
	return a != nil && a.By != "" && a.Phase == string(latch.VerificationSuccessful)
}

// failed reports whether the analysis ended without passing, in a way that
// fails the Freight's verification: Failed (but a person's abort, which
// Kargo records as Failed), Error, Inconclusive.
func (a *AnalysisStatus) failed() bool {
	if a == nil || a.By == "" {
		return false
	}
	switch latch.VerificationPhase(a.Phase) {
	case latch.VerificationFailed:
		return a.Message != latch.UserAbortMessage
	case latch.VerificationError, latch.VerificationInconclusive:
		return true
	}
	return false
}

// aborted reports whether the analysis was stopped before a result: a
// person's abort in Kargo, or a run kargo-latch terminated or gave up on.
func (a *AnalysisStatus) aborted() bool {
	return a != nil && a.By != "" && (a.Phase == string(latch.VerificationAborted) ||
		(a.Phase == string(latch.VerificationFailed) && a.Message == latch.UserAbortMessage))
}

// phaseWord is the analysis's phase for people: an empty phase is a run no
// analysis controller has picked up (yet).
func (a *AnalysisStatus) phaseWord() string {
	switch {
	case a.NotPickedUp:
		return "not picked up"
	case a.LeftToKargo:
		return "left to Kargo (reverify)"
	case a.Phase == "":
		return string(latch.VerificationPending)
	}
	return a.Phase
}

// who names the verifier for people.
func (a *AnalysisStatus) who() string {
	run := ""
	if a.AnalysisRun != "" {
		run = " " + a.AnalysisRun
	}
	if a.By == latch.Actor {
		s := "kargo-latch's AnalysisRun" + run + " (verify-on-latch)"
		if a.AdoptedByKargo {
			s += ", which Kargo follows,"
		}
		return s
	}
	if run != "" {
		return "Kargo's verification (AnalysisRun" + run + ")"
	}
	return "Kargo's verification"
}

// sentence says, for wait, who verifies the cycle and where it stands.
func (a *AnalysisStatus) sentence() string {
	switch {
	case a.By == "" && a.VerifyOnLatch:
		return "no verification of the cycle has started: once the cycle has latched, kargo-latch starts the Stage's analysis " +
			"(verify-on-latch) if Kargo has not within the operator's --verify-grace; the Stage's Events say why when it does not"
	case a.By == "":
		return "Kargo has not started the Stage's verification of the cycle (it starts one only in a pass that sees the Stage Healthy)"
	case a.NotPickedUp:
		return a.who() + " has not been picked up by an Argo Rollouts analysis controller"
	}
	return withMessage(fmt.Sprintf("%s is %s", a.who(), a.phaseWord()), a.Message)
}

// analysisCell is the ANALYSIS column: who verifies the current cycle, and
// its phase.
func analysisCell(r StageStatus, now time.Time) string {
	a := r.Analysis
	switch {
	case a == nil:
		return "-"
	case a.By != "":
		return a.By + ": " + a.phaseWord()
	case a.VerifyOnLatch && r.Record != nil && r.Record.Phase == latch.PhaseLatched && r.LatchedAt != nil &&
		now.Before(r.LatchedAt.Add(defaultVerifyGrace)):
		return "waiting for Kargo"
	}
	return "not started"
}

// runCell is the RUN column of -o wide: the AnalysisRun that verifies the
// current cycle.
func runCell(r StageStatus) string {
	if r.Analysis == nil {
		return "-"
	}
	return dash(r.Analysis.AnalysisRun)
}
