package latch

import "time"

// Health is a Stage's health as Kargo reports it in status.health.status.
type Health string

// The health values Kargo writes. HealthMissing stands for a Stage whose
// status.health is absent, which Kargo does right after a promotion.
const (
	HealthMissing       Health = ""
	HealthHealthy       Health = "Healthy"
	HealthNotApplicable Health = "NotApplicable"
	HealthProgressing   Health = "Progressing"
	HealthUnknown       Health = "Unknown"
	HealthUnhealthy     Health = "Unhealthy"
)

// keepsLatch reports whether a latched Stage in this health stays Latched.
// Progressing is the flap the latch exists to ignore.
func (h Health) keepsLatch() bool {
	return h == HealthHealthy || h == HealthNotApplicable || h == HealthProgressing
}

// PromotionPhase is the phase of a Kargo Promotion.
type PromotionPhase string

// Terminal Promotion phases as Kargo records them in status.lastPromotion.
const (
	PromotionSucceeded PromotionPhase = "Succeeded"
	PromotionFailed    PromotionPhase = "Failed"
	PromotionErrored   PromotionPhase = "Errored"
	PromotionAborted   PromotionPhase = "Aborted"
)

// Promotion is what the machine needs of status.lastPromotion.
type Promotion struct {
	Name       string
	Phase      PromotionPhase
	FinishedAt *time.Time
	Freight    string
}

// VerificationPhase is the phase of a Kargo VerificationInfo.
type VerificationPhase string

// The verification phases kargo-latch acts on or writes. Kargo also has
// Pending, Running, Aborted and Inconclusive; of these only Pending and
// Running are not terminal.
const (
	VerificationSuccessful VerificationPhase = "Successful"
	VerificationFailed     VerificationPhase = "Failed"
	VerificationError      VerificationPhase = "Error"
	VerificationPending    VerificationPhase = "Pending"
	VerificationRunning    VerificationPhase = "Running"
	// VerificationInconclusive is an analysis that could not decide; for a
	// run kargo-latch started it is a failure (VerificationInconclusive).
	VerificationInconclusive VerificationPhase = "Inconclusive"
	// VerificationAborted is a run terminated on request.
	VerificationAborted VerificationPhase = "Aborted"
)

// UserAbortMessage is how Kargo records a person aborting a verification: as
// phase Failed with this message. It is not a failure of the Stage.
const UserAbortMessage = "Verification aborted by user"

// Verification is freightHistory[0].verificationHistory[0].
type Verification struct {
	ID      string
	Phase   VerificationPhase
	Message string
	// Run names the AnalysisRun Kargo follows for it (analysisRun.name):
	// kargo-latch's own run once Kargo has adopted it.
	Run string
	// Actor is who started (or aborted) it, as Kargo records it.
	Actor string
}

func (v *Verification) terminal() bool {
	return v != nil && v.ID != "" && v.Phase != "" &&
		v.Phase != VerificationPending && v.Phase != VerificationRunning
}

// Observation is one look at a Stage's status and the pauses covering it.
type Observation struct {
	// Stage is the Stage's name; it names the pauses the machine asks for.
	Stage string
	// Pauses names the StagePauses that cover the Stage now, sorted, and
	// PauseUIDs gives their UIDs by name.
	Pauses    []string
	PauseUIDs map[string]string
	// CreatedWithoutRecord is when the Stage was created, given only when
	// it carries no record annotation at all (not a garbage one, not a
	// newer version's, not one someone removed from a Stage older than the
	// NewFailureWindow): a Stage that may have been made and failed while no
	// replica led.
	CreatedWithoutRecord *time.Time
	// PausesMadeAs maps a failure pause's derived name, when another object
	// held that name, to the name its pause was made under instead: the
	// record then names the pause that exists (see pausing.Failures).
	PausesMadeAs map[string]string
	// Deleted names the pauses the operator made for this Stage's failures
	// that someone has deleted and that the operator holds until the record
	// shows the resume: they cover nothing, and are never made again.
	Deleted []string
	// LastPromotion is status.lastPromotion, nil when the Stage has none.
	LastPromotion *Promotion
	// PromotionRunning is true while status.currentPromotion is set.
	PromotionRunning bool
	// Health is status.health.status. Strings Kargo does not define must be
	// mapped to HealthUnknown by the caller, which also sets HealthInvalid.
	Health Health
	// HealthInvalid marks a health string Kargo does not define. Such a
	// value is garbage: it never latches a Stage, and never degrades or
	// fails one either; the phase holds as while Kargo does not judge health.
	HealthInvalid bool
	// PreviousHealth is the health the caller saw on its previous look at
	// this Stage, if it remembers one. It only serves to count Progressing
	// flaps once each; it is never persisted, so flaps cause no writes.
	PreviousHealth Health
	// FreightID is status.freightHistory[0].id, the current Freight
	// collection; Freight names the Freight in it.
	FreightID string
	Freight   string
	// Verification is the newest verification of the current Freight.
	Verification *Verification
	// FreightNames are the names of the Freight in freightHistory[0]: what
	// mark-verified marks.
	FreightNames []string
	// HasVerification is true when the Stage has spec.verification.
	HasVerification bool
	// Apps are the Argo CD Applications of status.health.output, nil when
	// Kargo wrote no output or one of a shape kargo-latch does not know:
	// then only the aggregate health counts.
	Apps []App
	// HealthChecks is how many health checks the last promotion left for
	// Kargo to run, and HealthOutputs how many entries Kargo's health
	// output has. Kargo writes an entry only for a check that returned
	// output, so fewer entries than checks mean that Apps is not all that
	// Kargo checks: a check without output may be what keeps the Stage
	// Progressing, and only the aggregate health counts. So it does unless
	// both are equal and not zero (appsJudged).
	HealthChecks, HealthOutputs int
	// Runs are the AnalysisRuns for this Stage that verify-on-latch may
	// follow or start from: kargo-latch's own (from its cache), and, in the
	// sync that is about to start one, any run Kargo's own lookup would
	// find for the current Freight collection (read live).
	Runs []Run
	// RunGone names a run the record follows that the API server no longer
	// has (read live, never judged from the cache alone: a run just made
	// may not be cached yet).
	RunGone string
	// AbortRequested is the verification id the Stage's Kargo request token
	// kargo.akuity.io/abort names ("" for none): Kargo aborts that
	// verification on its next pass while it runs.
	AbortRequested string
	// Reverify is set while the Stage carries kargo.akuity.io/reverify,
	// for any verification: Kargo's next start of a verification then skips
	// its lookup and makes a run of its own (Kargo never removes the token).
	Reverify bool
	// StartRefused is set when starting this cycle's run was refused as
	// something kargo-latch cannot build exactly as Kargo would (reported
	// once); the machine then asks for no run.
	StartRefused bool
	// MayMark lets the machine ask to mark Freight verified. The operator
	// sets it only for a view it has just read from the API server (the
	// Stage and the pauses covering it), after the latch was stored, and
	// while no earlier refusal holds marking back.
	MayMark bool
}

// App is one Argo CD Application as Kargo's argocd-update health check
// reports it in status.health.output.
type App struct {
	Name      string
	Namespace string
	// Health is health.status: Healthy, Progressing, Degraded, ...
	Health string
	// Sync is sync.status: Synced, OutOfSync, ...
	Sync string
}

// Key names the App in the record: "namespace/name".
func (a App) Key() string { return a.Namespace + "/" + a.Name }

// counts reports whether this App, seen while health is judged, has been
// Healthy.
func (a App) counts() bool { return a.Health == "Healthy" && a.Sync == "Synced" }

// MaxApps bounds the per-Application latch: a Stage listing more Apps than
// this is judged on its aggregate health alone, so that the record stays
// small.
const MaxApps = 100

// Settings are the per-Stage settings (annotations, else operator flags).
type Settings struct {
	// LatchDeadline is the time allowed from a promotion to the first
	// Healthy. Zero disables the deadline.
	LatchDeadline time.Duration
	// DegradedGrace is how long a latched Stage may be Unhealthy or Unknown
	// before that is a failure.
	DegradedGrace time.Duration
	// PauseOnFailure makes a failure pause the Stage.
	PauseOnFailure bool
	// DrainOnPause aborts queued auto-promotions when the Stage is paused.
	DrainOnPause bool
	// MarkVerified marks a latched cycle's Freight verified in the Stage,
	// as Kargo does when it sees the Stage Healthy.
	MarkVerified bool
	// VerifyOnLatch starts the Stage's configured verification once a
	// cycle has latched, when Kargo has not started one (verify-on-latch).
	VerifyOnLatch bool
	// VerifyGrace is how long after the latch Kargo is given to start its
	// own verification before kargo-latch starts it.
	VerifyGrace time.Duration
	// TerminateAfter is how long a run kargo-latch cut short waits before
	// it is terminated (never less than VerifyGrace): a Healthy pass of
	// Kargo that listed the run just before it left Kargo's lookup shows in
	// Kargo's status by then, and the run is then Kargo's to end.
	TerminateAfter time.Duration
	// VerifyPickupTimeout is how long a run kargo-latch made may show no
	// phase before that is reported: no analysis controller picked it up.
	VerifyPickupTimeout time.Duration
	// NewFailureWindow is how recent a Stage without any record, and its
	// failed promotion, must be for the operator to act on the failure when
	// it first sees the Stage: one created and failed while no replica led
	// (a failover, an upgrade). Anything older is history (a first install),
	// recorded only; so is any failure under a garbage record.
	NewFailureWindow time.Duration
}
