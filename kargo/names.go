package kargo

import "k8s.io/apimachinery/pkg/runtime/schema"

// GroupVersion is the only version of Kargo's API.
var GroupVersion = schema.GroupVersion{Group: "kargo.akuity.io", Version: "v1alpha1"}

// Resources kargo-latch reads.
var (
	StagesResource     = GroupVersion.WithResource("stages")
	PromotionsResource = GroupVersion.WithResource("promotions")
	FreightsResource   = GroupVersion.WithResource("freights")
	WarehousesResource = GroupVersion.WithResource("warehouses")
)

// StateAnnotation is kargo-latch's own: the durable latch record as JSON.
const StateAnnotation = OwnPrefix + "state"

// InvalidStateAnnotation keeps the newest value of StateAnnotation that was
// no latch record (garbage), or its first 16 KiB, written by the write that
// replaced it with a fresh record, so that a person may mend it. The
// operator never reads it back, and its cache leaves it out.
const InvalidStateAnnotation = OwnPrefix + "invalid-state"

// Annotations of Kargo's that kargo-latch reads or writes.
const (
	// CreateActorAnnotation names who created a Promotion. Kargo's own
	// auto-promotions have none, or one starting with "controller:".
	CreateActorAnnotation = "kargo.akuity.io/create-actor"
	// RefreshAnnotation on a Stage makes Kargo reconcile it at once.
	RefreshAnnotation = "kargo.akuity.io/refresh"
	// AbortAnnotation on a Promotion makes Kargo abort it; on a Stage it
	// asks Kargo to abort the verification it names (a request token:
	// the verification's id, or a JSON VerificationRequest).
	AbortAnnotation = "kargo.akuity.io/abort"
	// ReverifyAnnotation on a Stage asks Kargo to verify its Freight again;
	// Kargo then starts a run without its lookup, and never removes it.
	ReverifyAnnotation = "kargo.akuity.io/reverify"
)

// StageLabel is the label Kargo's webhook puts on every Promotion: the name
// of its Stage.
const StageLabel = "kargo.akuity.io/stage"

// ShardLabel is the label Kargo shards its controllers by: its Stage webhook
// sets it from spec.shard, its Promotion webhook copies the Stage's onto
// every Promotion of the Stage, and its default controller takes the
// objects without it.
const ShardLabel = "kargo.akuity.io/shard"

// The values of status.health.status that Kargo defines. The CRD does not
// enforce them, so anything else may appear and is read as Unknown.
const (
	HealthHealthy       = "Healthy"
	HealthNotApplicable = "NotApplicable"
	HealthProgressing   = "Progressing"
	HealthUnknown       = "Unknown"
	HealthUnhealthy     = "Unhealthy"
)

// KnownHealth reports whether s is a health value Kargo defines.
func KnownHealth(s string) bool {
	switch s {
	case HealthHealthy, HealthNotApplicable, HealthProgressing, HealthUnknown, HealthUnhealthy:
		return true
	}
	return false
}
