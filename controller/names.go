package controller

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
