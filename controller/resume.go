package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
)

// A failure's StagePause is made before the record that names it is stored,
// so that the gate does not wait on the Stage's store (which Kargo's webhook,
// a conflict storm or an outage can hold up). Its finalizer is what keeps a
// resume from being undone meanwhile: deleting the pause resumes at once,
// but the object stays, held for resume, until the Stage's record is
// durable; a failure judged again finds it there and does not make it anew.

// heldPauses returns the cached pauses this operator made for the Stage's
// failures that someone deleted and that it still holds.
func (c *Controller) heldPauses(stage *kargo.Stage) []*v1alpha1.StagePause {
	var out []*v1alpha1.StagePause
	for _, p := range c.pausesIn(stage.Namespace) {
		if p.HeldForResume() && p.Covers(stage.Name) && ownedBy(p, stage) {
			out = append(out, p)
		}
	}
	sortPauses(out)
	return out
}

// ownedBy reports whether p was made for this Stage, not for an earlier
// Stage of the same name.
func ownedBy(p *v1alpha1.StagePause, stage *kargo.Stage) bool {
	for _, ref := range p.OwnerReferences {
		if ref.Kind == "Stage" && ref.Name == stage.Name {
			return ref.UID == stage.UID
		}
	}
	return true
}

// releasePauses lets go of held pauses once the record that shows their
// resume is stored: they are deleted for good.
func (c *Controller) releasePauses(ctx context.Context, held []*v1alpha1.StagePause) error {
	if c.cfg.DryRun {
		return nil
	}
	for _, p := range held {
		if err := c.release(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// release removes the operator's finalizer from p, conditional on the
// resourceVersion it was read at.
func (c *Controller) release(ctx context.Context, p *v1alpha1.StagePause) error {
	rest := slices.DeleteFunc(slices.Clone(p.Finalizers), func(f string) bool { return f == v1alpha1.ResumeFinalizer })
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": p.ResourceVersion, "finalizers": rest}})
	if err != nil {
		return err
	}
	_, err = c.cfg.Dynamic.Resource(v1alpha1.StagePausesResource).Namespace(p.Namespace).
		Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: api.FieldManager})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("releasing deleted StagePause %s: %w", p.Name, err)
	}
	klog.FromContext(ctx).V(2).Info("Released a deleted StagePause", "pause", klog.KRef(p.Namespace, p.Name))
	return nil
}

// releaseOrphan releases a held pause whose Stage is gone (deleted, or made
// again under the same name): no record will ever name it. A sharded
// operator's caches hold only its shard's Stages, so it asks the API
// server before: a Stage of another shard is its operator's to release.
func (c *Controller) releaseOrphan(ctx context.Context, p *v1alpha1.StagePause) error {
	for _, s := range c.stagesIn(p.Namespace) {
		if p.Covers(s.Name) && ownedBy(p, s) {
			return nil // the Stage's own sync releases it
		}
	}
	if ShardKey(c.cfg.Shard, c.cfg.DefaultShard) != "" {
		u, err := c.cfg.Dynamic.Resource(kargo.StagesResource).Namespace(p.Namespace).Get(ctx, p.Spec.Stage, metav1.GetOptions{})
		switch {
		case err == nil && ownedBy(p, kargo.StageFromUnstructured(u)):
			return nil
		case err != nil && !apierrors.IsNotFound(err):
			return fmt.Errorf("reading the Stage of deleted StagePause %s: %w", p.Name, err)
		}
	}
	return c.releasePauses(ctx, []*v1alpha1.StagePause{p})
}

// resumedMessage is the message of the StageResumed Event. A person who
// rolled back while the Stage was paused made Kargo (v1.11.1+) hold
// auto-promotion from that origin, and that hold outlives the StagePause:
// the Event then says so, and how to release it, so that nobody wonders why
// nothing flows after the resume. kargo-latch never releases it itself.
// How to release comes before the holds, and the list stops after a few:
// an Event's message is cut at a kilobyte, and a Stage name alone may take
// a quarter of it.
func resumedMessage(stage *kargo.Stage) string {
	const resumed = "The last StagePause covering the Stage was deleted; Kargo was asked to refresh it and may auto-promote again"
	if stage.Status == nil || len(stage.Status.Holds) == 0 {
		return resumed
	}
	holds := stage.Status.Holds
	held := make([]string, 0, min(len(holds), maxHoldsNamed))
	for _, h := range holds[:min(len(holds), maxHoldsNamed)] {
		held = append(held, h.Describe())
	}
	list := strings.Join(held, "; ")
	if more := len(holds) - len(held); more > 0 {
		list += fmt.Sprintf("; and %d more", more)
	}
	return fmt.Sprintf("%s. But Kargo itself still holds auto-promotion: to release it, %s. Kargo's holds: %s",
		resumed, kargo.HoldRelease(stage.Namespace, stage.Name), list)
}

// maxHoldsNamed is how many holds the StageResumed Event names; kargo-latch
// status shows them all.
const maxHoldsNamed = 3
