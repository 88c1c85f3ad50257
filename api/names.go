// Package api names kargo-latch's marks on Kargo objects and its Events:
// the annotations and labels it reads and writes, its field manager, and
// its Event reasons (the contract's "Per-Stage settings", "Operator-owned
// marks" and "Events"). The StagePause kind is api/v1alpha1.
package api

import "github.com/kargo-latch/kargo-latch/kargo"

// Annotations and labels of kargo-latch's on Stages (see the contract,
// "Per-Stage settings" and "Operator-owned marks").
const (
	// StateAnnotation holds the durable latch record as JSON.
	StateAnnotation = kargo.StateAnnotation

	PauseOnFailureAnnotation = "kargo-latch.io/pause-on-failure"
	LatchDeadlineAnnotation  = "kargo-latch.io/latch-deadline"
	DegradedGraceAnnotation  = "kargo-latch.io/degraded-grace"
	DrainOnPauseAnnotation   = "kargo-latch.io/drain-on-pause"
	MarkVerifiedAnnotation   = "kargo-latch.io/mark-verified"
	// VerifyOnLatchAnnotation: start the Stage's configured verification
	// once a cycle has latched, when Kargo has not (verify-on-latch).
	VerifyOnLatchAnnotation = "kargo-latch.io/verify-on-latch"
	// DrainedByAnnotation goes on a Promotion with the abort request of a
	// drain, naming the UID of the StagePause it drained for: once Kargo has
	// finished the Promotion (Aborted), it is how a drain tells its own
	// abort, still to be recorded in status.drained, from a person's.
	DrainedByAnnotation = "kargo-latch.io/drained-by"
)

// PausedLabel is on a Stage exactly while a StagePause covers it.
const PausedLabel = "kargo-latch.io/paused"

// FieldManager names kargo-latch's writes in managedFields.
const FieldManager = "kargo-latch"

// Event reasons. Warning reasons tell a person that an input was unusable.
const (
	ReasonHealthLatched         = "HealthLatched"
	ReasonStageDegraded         = "StageDegraded"
	ReasonStageRecovered        = "StageRecovered"
	ReasonLatchFailed           = "LatchFailed"
	ReasonStagePaused           = "StagePaused"
	ReasonStageResumed          = "StageResumed"
	ReasonPromotionDrained      = "PromotionDrained"
	ReasonPauseLabelRestored    = "PauseLabelRestored"
	ReasonInvalidConfig         = "InvalidConfig"
	ReasonInvalidState          = "InvalidState"
	ReasonNewerState            = "NewerState"
	ReasonUnknownHealth         = "UnknownHealth"
	ReasonStatusMissing         = "StatusMissing"
	ReasonFreightVerified       = "FreightVerified"
	ReasonMarkVerifiedForbidden = "MarkVerifiedForbidden"
	ReasonTooManyApps           = "TooManyApplications"
)

// Event reasons of verify-on-latch: the cycle's analysis, kept apart from
// the latch's verdict on health (HealthLatched).
const (
	ReasonVerificationStarted    = "VerificationStarted"
	ReasonVerificationSucceeded  = "VerificationSucceeded"
	ReasonVerificationFailed     = "VerificationFailed"
	ReasonVerificationTerminated = "VerificationTerminated"
	// ReasonVerificationCutShort: kargo-latch took a run of its own out of
	// Kargo's lookup before its result.
	ReasonVerificationCutShort = "VerificationCutShort"
	// ReasonVerificationAbortRequested: kargo-latch asked Kargo to abort
	// its verification of a run Kargo adopted.
	ReasonVerificationAbortRequested = "VerificationAbortRequested"
	// Warnings: what kept an analysis from running. None of them pauses.
	ReasonVerificationUnsupported = "VerificationUnsupported"
	ReasonVerificationNotPickedUp = "VerificationNotPickedUp"
	ReasonVerificationRunDeleted  = "VerificationRunDeleted"
	ReasonVerificationForbidden   = "VerificationForbidden"
	// ReasonVerificationUnavailable: verify-on-latch is off for the Stage's
	// project because the operator cannot watch its AnalysisRuns there
	// (Argo Rollouts' CRDs missing, no rights in the project); it turns on
	// again by itself once that is fixed.
	ReasonVerificationUnavailable = "VerificationUnavailable"
	// ReasonVerificationLeftToKargo: the Stage carries Kargo's reverify
	// token, so kargo-latch starts no run (Kargo skips its lookup then).
	ReasonVerificationLeftToKargo = "VerificationLeftToKargo"
)

// ReasonGateBypassed is the Warning on a Stage when an auto-promotion to it
// was created while a StagePause covered it: the pause gate did not stop it.
const ReasonGateBypassed = "GateBypassed"

// RequestedByAnnotation is on every Promotion (and PromotionRequest)
// created while a pause covered its Stage, with the username that created
// it, where the opt-in requested-by component is installed: the API server
// stamps it (the MutatingAdmissionPolicy kargo-latch-requested-by),
// overwriting any value the creator gave, and refuses any later change.
// The operator trusts it only on a Promotion it judges created under a
// pause, the only ones the policy covers; on one made where the component
// is not installed, a value could be anyone's.
const RequestedByAnnotation = "kargo-latch.io/requested-by"

// ReasonPauseNameTaken is the Warning on a Stage when the name derived for
// its failure's StagePause was held by an object that is not that pause
// (another Stage's, a person's): the pause is made under another name.
const ReasonPauseNameTaken = "PauseNameTaken"

// ReasonGateSettingDiffers is the Warning, at the operator's start, on an
// installed pause-gate policy that names Kargo's controllers otherwise than
// the operator was told (--kargo-controllers, --kargo-controller-regex).
const ReasonGateSettingDiffers = "GateSettingDiffers"

// ReasonPauseStatusContested is the Warning on a StagePause whose status
// another writer keeps undoing this operator's count in.
const ReasonPauseStatusContested = "PauseStatusContested"
