// Package v1alpha1 holds kargo-latch's own API: the StagePause kind
// (stagepauses.kargo-latch.io). Its CRD is manifests/crds; a test keeps the
// two in step.
package v1alpha1

import (
	"crypto/sha256"
	"encoding/hex"
	"maps"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion of kargo-latch's API.
var GroupVersion = schema.GroupVersion{Group: "kargo-latch.io", Version: "v1alpha1"}

// StagePausesResource is the resource of StagePause objects.
var StagePausesResource = GroupVersion.WithResource("stagepauses")

// AllStages in spec.stage pauses every Stage of the project.
const AllStages = "*"

// Reasons kargo-latch itself uses; a failure's reason is used as is.
const (
	ReasonManual       = "Manual"
	ReasonProjectPause = "ProjectPause"
)

// Labels every StagePause carries, so that pauses can be listed by Stage
// and reason.
const (
	StageLabel  = "kargo-latch.io/stage"
	ReasonLabel = "kargo-latch.io/reason"
)

// StageLabelValue is the value of StageLabel for a pause of stage: the
// Stage's name, "all" for AllStages, and for a name longer than a label
// value may be (63; a Stage name may have 253) its first 52 characters and
// a hash of the whole. spec.stage, not the label, is what a pause covers.
func StageLabelValue(stage string) string {
	const maxLabel = 63
	switch {
	case stage == AllStages:
		return "all"
	case len(stage) <= maxLabel:
		return stage
	}
	sum := sha256.Sum256([]byte(stage))
	return strings.TrimRight(stage[:maxLabel-11], ".-_") + "-" + hex.EncodeToString(sum[:5])
}

// ResumeFinalizer is on every StagePause the operator makes for a failure.
// Deleting such a pause resumes at once (a pause being deleted covers
// nothing, for the gate as for the operator), but the object stays until the
// operator has stored the record that shows the resume: a failure judged
// again after a store that failed, or after a crash, then finds its pause
// there, being deleted, instead of making it again. A resume is never undone.
const ResumeFinalizer = "kargo-latch.io/resume"

// DerivedNameAnnotation is on every StagePause the operator makes for a
// failure, with the name derived from that failure. It is the pause's own
// name unless another object held that name when the pause was made (see
// PauseNameTaken in docs/pausing.md): a failure judged again then finds its
// pause by this annotation, and never makes a second one.
const DerivedNameAnnotation = "kargo-latch.io/derived-name"

// PausedByAnnotation is on a StagePause made by kargo-latch's CLI or its
// dashboard: the user who made it, as the API server named them
// (SelfSubjectReview) when it was made. It is for people to read; anyone
// who may create a pause may write any value here, so nothing relies on it.
const PausedByAnnotation = "kargo-latch.io/paused-by"

// HeldForResume reports whether p is an operator-made pause that someone
// deleted and that the operator still holds until the resume is recorded.
func (p *StagePause) HeldForResume() bool {
	return p.DeletionTimestamp != nil && slices.Contains(p.Finalizers, ResumeFinalizer)
}

// StagePause pauses a Stage, or every Stage of its project, while it
// exists. Deleting it resumes.
type StagePause struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   StagePauseSpec   `json:"spec"`
	Status StagePauseStatus `json:"status,omitempty"`
}

// StagePauseSpec says what is paused and why. It is immutable.
type StagePauseSpec struct {
	// Stage is a Stage name in this namespace, or "*" for all of them.
	Stage string `json:"stage"`
	// Reason is Manual, ProjectPause, or a failure reason such as
	// PromotionFailed or Degraded. Empty reads as Manual.
	Reason string `json:"reason,omitempty"`
	// Message is free text for people.
	Message string `json:"message,omitempty"`
}

// StagePauseStatus is written by the operator.
type StagePauseStatus struct {
	// Since is when the pause took effect.
	Since *metav1.Time `json:"since,omitempty"`
	// Drained names the Promotions aborted when the pause took effect.
	Drained []string `json:"drained,omitempty"`
	// Stages is how many Stages the pause covers now, from Shards: the
	// unsharded operator's count ("*") when there is one, else the sum of
	// the others. (An unsharded operator sees every Stage: while it runs
	// beside the shards' operators, as during an upgrade to shards, its
	// count is the whole.)
	Stages int32 `json:"stages"`
	// Shards is how many Stages each operator pauses now, by its key: its
	// shard's name, "default" for the operator of the Stages without a
	// shard (--default-shard alone), "*" for an unsharded operator. Each
	// writes only its own key; a shard's operator removes it at 0, an
	// unsharded one keeps it. The "*" and "default" operators, each the
	// other's successor on the same Lease, also remove each other's, once
	// per leadership term.
	Shards map[string]int32 `json:"shards,omitempty"`
	// Conditions: Active says whether the pause covers any Stage now.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ConditionActive is True while the pause covers at least one Stage.
const ConditionActive = "Active"

// Covers reports whether the pause applies to the Stage named stage.
func (p *StagePause) Covers(stage string) bool {
	return p.Spec.Stage == AllStages || p.Spec.Stage == stage
}

// EffectiveReason is the reason, with Manual for an empty one.
func (p *StagePause) EffectiveReason() string {
	if p.Spec.Reason == "" {
		return ReasonManual
	}
	return p.Spec.Reason
}

// DeepCopyObject implements runtime.Object.
func (p *StagePause) DeepCopyObject() runtime.Object { return p.DeepCopy() }

// DeepCopy returns a copy of p that shares no memory with it.
func (p *StagePause) DeepCopy() *StagePause {
	if p == nil {
		return nil
	}
	c := &StagePause{TypeMeta: p.TypeMeta, Spec: p.Spec, Status: *p.Status.DeepCopy()}
	p.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	return c
}

// DeepCopy returns a copy of s that shares no memory with it.
func (s *StagePauseStatus) DeepCopy() *StagePauseStatus {
	c := &StagePauseStatus{Stages: s.Stages, Drained: append([]string(nil), s.Drained...)}
	if s.Shards != nil {
		c.Shards = maps.Clone(s.Shards)
	}
	if s.Since != nil {
		c.Since = s.Since.DeepCopy()
	}
	for _, cond := range s.Conditions {
		var cc metav1.Condition
		cond.DeepCopyInto(&cc)
		c.Conditions = append(c.Conditions, cc)
	}
	return c
}
