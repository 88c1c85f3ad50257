package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
)

// A StagePause is per project, and a project's Stages may be served by the
// operators of several shards. Each counts the Stages it serves under its
// own key of status.shards and sets status.stages to the sum of all keys;
// since and the Active condition follow from the pause and that sum alone.
// So every shard computes the same status from the same object: one that
// finds it right writes nothing, and no two shards undo each other. Each
// write is conditional on the resourceVersion its sum was computed from: a
// shard that wrote its key meanwhile makes it conflict, and the retry sums
// again from the cache once it shows that write.

// syncPauseStatus keeps a StagePause's status (since, stages, shards, the
// Active condition) true to the Stages that exist now. status.drained is
// written when the pause takes effect (see drain).
func (c *Controller) syncPauseStatus(ctx context.Context, key cache.ObjectName) (time.Duration, error) {
	inf := c.informerFor(c.pauseInformers, key.Namespace)
	if inf == nil {
		return 0, nil
	}
	obj, exists, err := inf.GetIndexer().GetByKey(key.String())
	if err != nil || !exists {
		return 0, err
	}
	p, ok := obj.(*v1alpha1.StagePause)
	if !ok {
		return 0, nil
	}
	if p.DeletionTimestamp != nil {
		if p.HeldForResume() {
			return 0, c.releaseOrphan(ctx, p)
		}
		return 0, nil
	}
	var covered int32
	for _, s := range c.stagesIn(p.Namespace) {
		if p.Covers(s.Name) {
			covered++
		}
	}
	shard := ShardKey(c.cfg.Shard, c.cfg.DefaultShard)
	want := pauseStatus(p, shard, covered)
	if statusEqual(&p.Status, want) || c.cfg.DryRun {
		return 0, nil
	}
	body, err := json.Marshal(statusPatch(p, shard, want))
	if err != nil {
		return 0, err
	}
	_, err = c.cfg.Dynamic.Resource(v1alpha1.StagePausesResource).Namespace(p.Namespace).
		Patch(ctx, p.Name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: FieldManager}, "status")
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err == nil {
		klog.FromContext(ctx).V(2).Info("Updated StagePause status", "pause", klog.KRef(p.Namespace, p.Name),
			"stages", want.Stages, "shard", shard, "shardStages", covered)
	}
	return 0, err
}

// pauseStatus is the status p should have when this operator's caches show
// it covering covered Stages. shard is this operator's key in
// status.shards (see ShardKey); "" when unsharded: then covered is the
// whole count, and status.shards goes.
func pauseStatus(p *v1alpha1.StagePause, shard string, covered int32) *v1alpha1.StagePauseStatus {
	want := p.Status.DeepCopy()
	want.Stages = covered
	if shard == "" {
		// An unsharded operator serves every Stage: counts that shards
		// left behind (an installation that stopped sharding) are stale.
		want.Shards = nil
	} else {
		if covered > 0 {
			if want.Shards == nil {
				want.Shards = map[string]int32{}
			}
			want.Shards[shard] = covered
		} else {
			delete(want.Shards, shard)
		}
		if len(want.Shards) == 0 {
			want.Shards = nil
		}
		want.Stages = 0
		for _, n := range want.Shards {
			want.Stages += n
		}
	}
	if want.Since == nil {
		since := p.CreationTimestamp
		want.Since = &since
	}
	cond := metav1.Condition{Type: v1alpha1.ConditionActive, Status: metav1.ConditionTrue, Reason: "Covering",
		Message: fmt.Sprintf("pauses %d Stage(s)", want.Stages), ObservedGeneration: p.Generation}
	if want.Stages == 0 {
		// No shard has such a Stage: one that lacks it while another has
		// it says nothing.
		cond.Status, cond.Reason = metav1.ConditionFalse, "StageNotFound"
		cond.Message = fmt.Sprintf("no Stage %q in namespace %s yet; the pause applies as soon as one appears", p.Spec.Stage, p.Namespace)
	}
	meta.SetStatusCondition(&want.Conditions, cond)
	return want
}

// statusPatch is the merge patch that takes p's status to want. A sharded
// operator's patch names only its own key of status.shards (null removes
// it, or the whole map when it was the last) and is conditional on p's
// resourceVersion, from which the sum was computed.
func statusPatch(p *v1alpha1.StagePause, shard string, want *v1alpha1.StagePauseStatus) map[string]any {
	status := map[string]any{"since": want.Since, "stages": want.Stages, "conditions": want.Conditions}
	patch := map[string]any{"status": status}
	if shard == "" {
		if len(p.Status.Shards) > 0 {
			status["shards"] = nil
		}
		return patch
	}
	patch["metadata"] = map[string]any{"resourceVersion": p.ResourceVersion}
	if own, had := want.Shards[shard], p.Status.Shards[shard]; own != had {
		switch {
		case len(want.Shards) == 0:
			status["shards"] = nil
		case own == 0:
			status["shards"] = map[string]any{shard: nil}
		default:
			status["shards"] = map[string]any{shard: own}
		}
	}
	return patch
}

func statusEqual(a, b *v1alpha1.StagePauseStatus) bool {
	if a.Stages != b.Stages || (a.Since == nil) != (b.Since == nil) || len(a.Conditions) != len(b.Conditions) || !maps.Equal(a.Shards, b.Shards) {
		return false
	}
	if a.Since != nil && !a.Since.Equal(b.Since) {
		return false
	}
	for i := range a.Conditions {
		x, y := a.Conditions[i], b.Conditions[i]
		if x.Type != y.Type || x.Status != y.Status || x.Reason != y.Reason || x.Message != y.Message || x.ObservedGeneration != y.ObservedGeneration {
			return false
		}
	}
	return true
}
