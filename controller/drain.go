package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// drainOwed says what drain a sync owes, if any. A Stage becoming paused,
// or whose live drain failed before, is drained from a live read of its
// Promotions; a Stage paused already, of what the cache shows: an
// auto-promotion queued and not yet asked to abort (an API server may admit
// one a moment after the pause, before its gate's own view of the pauses
// has it, or a Kargo running under an ungated identity may make one: see
// gatebypass.go; its event brought this sync), and one this operator asked
// to abort for a covering pause whose status.drained does not list it yet.
func drainOwed(s *snapshot, res latch.Result) *drainPlan {
	if !s.settings.DrainOnPause || len(s.pauses) == 0 {
		return nil
	}
	var live *v1alpha1.StagePause
	if a, ok := actionOf(res, latch.ActionPaused); ok {
		live = pauseNamed(s.pauses, a.Pause)
	} else if s.memo.liveDrainOwed != "" {
		live = pauseWithUID(s.pauses, s.memo.liveDrainOwed)
	}
	if live != nil {
		return &drainPlan{live: live}
	}
	if len(res.Record.Pauses) == 0 {
		return nil
	}
	if late := cachedUndrained(s.promotions, s.pauses); len(late) > 0 {
		return &drainPlan{late: late, pauses: s.pauses}
	}
	return nil
}

// drainBeside drains a Stage as planned, concurrently with the caller's
// store of the record that says it is paused; the returned function waits
// for it. The drain's live read and its aborts would otherwise stand
// between a failure and the Stage's label: a pause would cost three round
// trips to the API server instead of two (the StagePause, then the label).
// Either order survives a crash or a refused write: the drain is
// idempotent, so a sync whose store failed repeats it; a record stored
// without its drain is a paused Stage, whose syncs read live again until a
// live drain succeeds (a refused read or abort), or, after a restart, drain
// every queued auto-promotion the cache shows, which is all of them once
// its list is read.
func (c *Controller) drainBeside(ctx context.Context, s *snapshot, d *drainPlan) (wait func() error) {
	m := s.memo
	if owed := m.liveDrainOwed; owed != "" && pauseWithUID(s.pauses, owed) == nil {
		m.liveDrainOwed = "" // that pause is gone: nothing is owed to it
	}
	if d == nil {
		return func() error { return nil }
	}
	done := make(chan error, 1)
	go func() { done <- c.drainNow(ctx, s.stage, d) }()
	return func() error {
		err := <-done
		// A live drain that failed is owed until one succeeds: the
		// retry of a paused Stage would otherwise drain from the cache
		// alone, which may not show an auto-promotion made just before
		// the pause (a stalled watch).
		switch {
		case d.live != nil && err != nil:
			m.liveDrainOwed = d.live.UID
		case d.live != nil && m.liveDrainOwed == d.live.UID:
			m.liveDrainOwed = ""
		}
		return err
	}
}

// drainNow aborts the queued auto-promotions a drain plan names: read live
// for a pause taking effect, or from the cache.
func (c *Controller) drainNow(ctx context.Context, stage *kargo.Stage, d *drainPlan) error {
	if d.live != nil {
		queued, err := c.stagePromotions(ctx, stage, d.live)
		if err != nil {
			return err
		}
		return c.drain(ctx, stage, d.live, queued)
	}
	for _, p := range d.pauses {
		if err := c.drain(ctx, stage, p, d.late[p.UID]); err != nil {
			return err
		}
	}
	return nil
}

// cachedUndrained sorts the Promotions of a paused Stage that the cache
// shows and a drain still owes by the covering pause to drain them for: one
// marked as this operator's abort for a pause not yet listing it, and an
// auto-promotion queued and not yet asked to abort, for the first pause.
func cachedUndrained(cached []*kargo.Promotion, pauses []*v1alpha1.StagePause) map[types.UID][]*kargo.Promotion {
	var out map[types.UID][]*kargo.Promotion
	add := func(uid types.UID, p *kargo.Promotion) {
		if out == nil {
			out = map[types.UID][]*kargo.Promotion{}
		}
		out[uid] = append(out[uid], p)
	}
	for _, p := range cached {
		if owner := pauseWithUID(pauses, drainedFor(p)); owner != nil {
			if !slices.Contains(owner.Status.Drained, p.Name) {
				add(owner.UID, p)
			}
			continue
		}
		if queuedAuto(p) && !abortAsked(p) {
			add(pauses[0].UID, p)
		}
	}
	return out
}

func pauseWithUID(pauses []*v1alpha1.StagePause, uid types.UID) *v1alpha1.StagePause {
	for _, p := range pauses {
		if uid != "" && p.UID == uid {
			return p
		}
	}
	return nil
}

// drainedFor is the UID of the pause a drain of this operator asked to
// abort p for; empty when none did.
func drainedFor(p *kargo.Promotion) types.UID {
	if !abortAsked(p) {
		return ""
	}
	return types.UID(p.Annotations[api.DrainedByAnnotation])
}

func abortAsked(p *kargo.Promotion) bool {
	_, asked := p.Annotations[kargo.AbortAnnotation]
	return asked
}

// drain aborts the queued auto-promotions among queued (read when the Stage
// became paused, or seen later while it is), and lists them in the pause's
// status.drained. A Promotion runs only when
// it is Pending and Kargo's auto-promotion made it; Running Promotions and
// people's Promotions are never touched.
func (c *Controller) drain(ctx context.Context, stage *kargo.Stage, pause *v1alpha1.StagePause, queued []*kargo.Promotion) error {
	var drained []string
	for _, p := range queued {
		mine := drainedFor(p) == pause.UID
		if !mine && (!queuedAuto(p) || abortAsked(p)) {
			// Running, a person's, finished, or aborted by someone else
			// (a person, or a drain for another pause).
			continue
		}
		if c.cfg.DryRun {
			drained = append(drained, p.Name)
			continue
		}
		aborted, err := c.abort(ctx, p, pause)
		if err != nil {
			return err
		}
		if aborted {
			drained = append(drained, p.Name)
		}
	}
	if len(drained) == 0 {
		return nil
	}
	slices.Sort(drained)
	if c.cfg.DryRun {
		klog.FromContext(ctx).Info("Dry run: would abort queued auto-promotions", "pause", pause.Name, "promotions", drained)
		c.report.Event(stage, corev1.EventTypeNormal, api.ReasonPromotionDrained,
			fmt.Sprintf("Dry run: would abort %d queued auto-promotion(s) as StagePause %s takes effect: %s", len(drained), pause.Name, strings.Join(drained, ", ")))
		return nil
	}
	added, err := c.addDrained(ctx, pause, drained)
	if err != nil || len(added) == 0 {
		// Reported by the sync that recorded them: a retry does not repeat
		// it. Until then, the abort's mark keeps them owed (drainFor).
		return err
	}
	c.report.Event(stage, corev1.EventTypeNormal, api.ReasonPromotionDrained,
		fmt.Sprintf("Aborted %d queued auto-promotion(s) as StagePause %s took effect: %s", len(added), pause.Name, strings.Join(added, ", ")))
	return nil
}

// abort asks Kargo to abort a queued auto-promotion, conditional on the
// Promotion as read: if it changed since (it started running, or an earlier
// try of this drain aborted it already, which a read shared by several
// drains does not show), it is read again and judged on that. It reports
// whether the Promotion is aborted (false when it is gone or no longer
// queued).
func (c *Controller) abort(ctx context.Context, p *kargo.Promotion, pause *v1alpha1.StagePause) (bool, error) {
	client := c.cfg.Dynamic.Resource(kargo.PromotionsResource).Namespace(p.Namespace)
	for range 3 {
		if abortAsked(p) {
			return drainedFor(p) == pause.UID, nil
		}
		if !queuedAuto(p) {
			return false, nil
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": p.ResourceVersion,
			"annotations":     map[string]string{kargo.AbortAnnotation: "terminate", api.DrainedByAnnotation: string(pause.UID)},
		}})
		_, err := client.Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: api.FieldManager})
		switch {
		case err == nil:
			return true, nil
		case apierrors.IsNotFound(err):
			return false, nil
		case !apierrors.IsConflict(err):
			return false, fmt.Errorf("aborting queued Promotion %s: %w", p.Name, err)
		}
		u, err := client.Get(ctx, p.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("reading queued Promotion %s: %w", p.Name, err)
		}
		p = kargo.PromotionFromUnstructured(u)
	}
	return false, fmt.Errorf("aborting queued Promotion %s: it keeps changing", p.Name)
}

// addDrained adds names to a pause's status.drained. Several Stages can
// drain into one project-wide pause at once, so it reads the pause fresh
// and writes conditionally.
func (c *Controller) addDrained(ctx context.Context, pause *v1alpha1.StagePause, names []string) (added []string, err error) {
	client := c.cfg.Dynamic.Resource(v1alpha1.StagePausesResource).Namespace(pause.Namespace)
	for range 5 {
		u, err := client.Get(ctx, pause.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		have, _, _ := unstructured.NestedStringSlice(u.Object, "status", "drained")
		added = nil
		for _, n := range names {
			if !slices.Contains(have, n) {
				added = append(added, n)
			}
		}
		if len(added) == 0 {
			return nil, nil
		}
		all := append(slices.Clone(have), added...)
		slices.Sort(all)
		all = slices.Compact(all)
		patch, _ := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": u.GetResourceVersion()},
			"status":   map[string]any{"drained": all},
		})
		_, err = client.Patch(ctx, pause.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: api.FieldManager}, "status")
		if err == nil {
			return added, nil
		}
		if !apierrors.IsConflict(err) {
			return nil, fmt.Errorf("recording drained Promotions on StagePause %s: %w", pause.Name, err)
		}
		// The drains of a project-wide pause's other Stages, or its status
		// sync, wrote it meanwhile: read it again.
	}
	return nil, fmt.Errorf("recording drained Promotions on StagePause %s: it keeps changing", pause.Name)
}
