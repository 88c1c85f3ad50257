package pausing

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
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/controller/report"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// Drainer aborts the queued auto-promotions of a Stage as a pause takes
// effect (drain-on-pause), and lists them in the pause's status.drained.
type Drainer struct {
	// Dynamic reads Promotions and StagePauses live, and writes the abort
	// request and status.drained.
	Dynamic dynamic.Interface
	Report  *report.Reporter
	Clock   clock.Clock
	// DryRun aborts nothing, and says what it would abort.
	DryRun bool
	// Selectors are the label selectors of this operator's shard: a
	// project-wide read lists only its Promotions.
	Selectors []string
	// ListPage lists one page of a namespace's Promotions as the Promotion
	// cache does (a table of their metadata, stage and phase).
	ListPage func(ctx context.Context, ns string, opts metav1.ListOptions) (*kargo.PromotionPage, error)
	// Cached returns the cached Promotions of a Stage.
	Cached func(*kargo.Stage) []*kargo.Promotion

	lists projectLists
}

// DrainPlan is the drain a sync owes a paused Stage (see DrainOwed).
type DrainPlan struct {
	// Live is the pause whose drain reads the Stage's Promotions from the
	// API server: the Stage is becoming paused, or such a drain failed.
	Live *v1alpha1.StagePause
	// Late are cached Promotions still owed a drain, by covering pause.
	Late   map[types.UID][]*kargo.Promotion
	Pauses []*v1alpha1.StagePause
}

// DrainOwed says what drain a sync owes, if any. A Stage becoming paused,
// or whose live drain failed before, is drained from a live read of its
// Promotions; a Stage paused already, of what the cache shows: an
// auto-promotion queued and not yet asked to abort (an API server may admit
// one a moment after the pause, before its gate's own view of the pauses
// has it, or a Kargo running under an ungated identity may make one: see
// controller/gatebypass; its event brought this sync), and one this operator asked
// to abort for a covering pause whose status.drained does not list it yet.
// liveOwed names the pause whose live drain failed before; cached are the
// Stage's cached Promotions; owedGone says that pause is gone, so nothing
// is owed to it any more. It is pure: the sync judges with it.
func DrainOwed(settings latch.Settings, pauses []*v1alpha1.StagePause, res latch.Result, liveOwed types.UID, cached []*kargo.Promotion) (d *DrainPlan, owedGone bool) {
	if !settings.DrainOnPause || len(pauses) == 0 {
		return nil, false
	}
	var live *v1alpha1.StagePause
	if a, ok := res.Action(latch.ActionPaused); ok {
		live = PauseNamed(pauses, a.Pause)
	} else if liveOwed != "" {
		if live = PauseWithUID(pauses, liveOwed); live == nil {
			owedGone = true // that pause is gone: nothing is owed to it
		}
	}
	if live != nil {
		return &DrainPlan{Live: live}, false
	}
	if len(res.Record.Pauses) == 0 {
		return nil, owedGone
	}
	if late := cachedUndrained(cached, pauses); len(late) > 0 {
		return &DrainPlan{Late: late, Pauses: pauses}, owedGone
	}
	return nil, owedGone
}

// Drain aborts the queued auto-promotions a drain plan names: read live
// for a pause taking effect, or from the cache.
func (d *Drainer) Drain(ctx context.Context, stage *kargo.Stage, plan *DrainPlan) error {
	if plan.Live != nil {
		queued, err := d.stagePromotions(ctx, stage, plan.Live)
		if err != nil {
			return err
		}
		return d.drain(ctx, stage, plan.Live, queued)
	}
	for _, p := range plan.Pauses {
		if err := d.drain(ctx, stage, p, plan.Late[p.UID]); err != nil {
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
		if owner := PauseWithUID(pauses, drainedFor(p)); owner != nil {
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
func (d *Drainer) drain(ctx context.Context, stage *kargo.Stage, pause *v1alpha1.StagePause, queued []*kargo.Promotion) error {
	var drained []string
	for _, p := range queued {
		mine := drainedFor(p) == pause.UID
		if !mine && (!queuedAuto(p) || abortAsked(p)) {
			// Running, a person's, finished, or aborted by someone else
			// (a person, or a drain for another pause).
			continue
		}
		if d.DryRun {
			drained = append(drained, p.Name)
			continue
		}
		aborted, err := d.abort(ctx, p, pause)
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
	if d.DryRun {
		klog.FromContext(ctx).Info("Dry run: would abort queued auto-promotions", "pause", pause.Name, "promotions", drained)
		d.Report.Event(stage, corev1.EventTypeNormal, api.ReasonPromotionDrained,
			fmt.Sprintf("Dry run: would abort %d queued auto-promotion(s) as StagePause %s takes effect: %s", len(drained), pause.Name, strings.Join(drained, ", ")))
		return nil
	}
	added, err := d.addDrained(ctx, pause, drained)
	if err != nil || len(added) == 0 {
		// Reported by the sync that recorded them: a retry does not repeat
		// it. Until then, the abort's mark keeps them owed (DrainOwed).
		return err
	}
	d.Report.Event(stage, corev1.EventTypeNormal, api.ReasonPromotionDrained,
		fmt.Sprintf("Aborted %d queued auto-promotion(s) as StagePause %s took effect: %s", len(added), pause.Name, strings.Join(added, ", ")))
	return nil
}

// abort asks Kargo to abort a queued auto-promotion, conditional on the
// Promotion as read: if it changed since (it started running, or an earlier
// try of this drain aborted it already, which a read shared by several
// drains does not show), it is read again and judged on that. It reports
// whether the Promotion is aborted (false when it is gone or no longer
// queued).
func (d *Drainer) abort(ctx context.Context, p *kargo.Promotion, pause *v1alpha1.StagePause) (bool, error) {
	client := d.Dynamic.Resource(kargo.PromotionsResource).Namespace(p.Namespace)
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
func (d *Drainer) addDrained(ctx context.Context, pause *v1alpha1.StagePause, names []string) (added []string, err error) {
	client := d.Dynamic.Resource(v1alpha1.StagePausesResource).Namespace(pause.Namespace)
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
