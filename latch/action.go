package latch

import "time"

// ActionKind names something a transition asks the operator to do or report.
type ActionKind string

// The actions Step returns. The controller turns them into Events, metrics
// and, later, pauses.
const (
	// ActionCycleStarted: a new successful promotion began a cycle.
	ActionCycleStarted ActionKind = "CycleStarted"
	// ActionLatched: the Stage became Healthy after its promotion.
	ActionLatched ActionKind = "Latched"
	// ActionDegraded: a latched Stage turned Unhealthy or Unknown.
	ActionDegraded ActionKind = "Degraded"
	// ActionRecovered: a degraded Stage is Healthy again within its grace.
	ActionRecovered ActionKind = "Recovered"
	// ActionFailed: the cycle failed; Reason says why.
	ActionFailed ActionKind = "Failed"
	// ActionProgressingIgnored: a latched Stage turned Progressing and the
	// latch held.
	ActionProgressingIgnored ActionKind = "ProgressingIgnored"
	// ActionCreatePause: create the StagePause named Pause for this failure
	// (pause-on-failure). The record already names it, so the request is
	// made once per failure.
	ActionCreatePause ActionKind = "CreatePause"
	// ActionPaused: the first StagePause, Pause, now covers the Stage.
	ActionPaused ActionKind = "Paused"
	// ActionResumed: the last StagePause covering the Stage is gone.
	ActionResumed ActionKind = "Resumed"
	// ActionMarkVerified: mark each of Freight verified in the Stage at
	// VerifiedAt (mark-verified). The record already names them, so the
	// request is made once per cycle and Freight.
	ActionMarkVerified ActionKind = "MarkVerified"
	// ActionStartVerification: create the AnalysisRun named Run, built as
	// Kargo builds it (verify-on-latch). The record already names it: the
	// operator makes it before it stores the record.
	ActionStartVerification ActionKind = "StartVerification"
	// ActionVerificationStarted: the record now names kargo-latch's run of
	// this cycle.
	ActionVerificationStarted ActionKind = "VerificationStarted"
	// ActionVerificationFinished: the cycle's run has a result, Phase.
	ActionVerificationFinished ActionKind = "VerificationFinished"
	// ActionCutShortRun: take kargo-latch's run Run, which no live cycle
	// needs any more and Kargo does not follow, out of Kargo's lookup (its
	// two labels), saying why (Message). Argo Rollouts ends a terminated
	// run Successful, which Kargo's lookup would adopt as a pass.
	ActionCutShortRun ActionKind = "CutShortRun"
	// ActionTerminateRun: set spec.terminate on kargo-latch's run Run, cut
	// short a grace ago, which Kargo does not follow.
	ActionTerminateRun ActionKind = "TerminateRun"
	// ActionAbortInKargo: ask Kargo to abort its verification
	// VerificationID, which follows kargo-latch's run Run (Kargo adopted
	// it), with Kargo's request token on the Stage: Kargo then records it
	// Failed itself. The record already says so: the token is written with
	// it, once.
	ActionAbortInKargo ActionKind = "AbortInKargo"
	// ActionVerificationLeftToKargo: the Stage carries Kargo's reverify
	// token, so Kargo's next start skips its lookup: kargo-latch starts no
	// run for this cycle, and says so once.
	ActionVerificationLeftToKargo ActionKind = "VerificationLeftToKargo"
	// ActionVerificationNotPickedUp: kargo-latch's run shows no phase past
	// the pickup timeout.
	ActionVerificationNotPickedUp ActionKind = "VerificationNotPickedUp"
	// ActionVerificationRunDeleted: kargo-latch's run was deleted before
	// its result.
	ActionVerificationRunDeleted ActionKind = "VerificationRunDeleted"
)

// Action is one consequence of a Step.
type Action struct {
	Kind    ActionKind
	Reason  FailureReason // for ActionFailed and ActionCreatePause
	Message string
	// Pause names the StagePause of ActionCreatePause and ActionPaused.
	Pause string
	// TimeToLatch is set on ActionLatched for a cycle the operator watched
	// from its start: the time from the promotion's finish to the latch.
	TimeToLatch time.Duration
	// Freight and VerifiedAt are set on ActionMarkVerified: the Freight to
	// mark, and the latch time to record as their verifiedAt.
	Freight    []string
	VerifiedAt time.Time
	// Run names the AnalysisRun of the verification actions; Phase is the
	// result of ActionVerificationFinished, and TimeToResult the time from
	// the latch to it.
	Run          string
	Phase        VerificationPhase
	TimeToResult time.Duration
	// VerificationID is Kargo's verification of ActionAbortInKargo.
	VerificationID string
}

// Result is the outcome of one Step.
type Result struct {
	Record  Record
	Actions []Action
	// RequeueAfter is positive exactly when a time-based transition (the
	// latch deadline or the degraded grace) is pending, and says when it is
	// due. Zero means nothing will happen without a new observation.
	RequeueAfter time.Duration
}

// Action returns the result's first action of a kind.
func (r Result) Action(kind ActionKind) (Action, bool) {
	for _, a := range r.Actions {
		if a.Kind == kind {
			return a, true
		}
	}
	return Action{}, false
}

// Has reports whether the result holds an action of a kind.
func (r Result) Has(kind ActionKind) bool {
	_, ok := r.Action(kind)
	return ok
}
