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

// A StagePause is per project, and a project's Stages may be served by
// several operators: one per shard, and, while an installation moves to
// shards, an unsharded one beside them. Each counts the Stages it pauses
// under its own key of status.shards (statusKey) and writes no other key
// (but the one it supersedes: see supersededKey). status.stages follows
// from the keys alone (stagesOf), and since and the Active condition from
// the pause and status.stages. So every operator computes the same status
// from the same object: one that finds it right writes nothing, and no two
// undo each other. Each write is conditional on the resourceVersion it was
// computed from: an operator that wrote its key meanwhile makes it
// conflict, and the retry computes again from the cache once it shows that
// write.

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
	shardKey := statusKey(c.cfg.Shard, c.cfg.DefaultShard)
	want := pauseStatus(p, shardKey, covered)
	if statusEqual(&p.Status, want) || c.cfg.DryRun {
		return 0, nil
	}
	body, err := json.Marshal(statusPatch(p, shardKey, want))
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
			"stages", want.Stages, "key", shardKey, "counted", covered)
	}
	return 0, err
}

// pauseStatus is the status p should have when this operator, whose key
// in status.shards is key, counts covered Stages under it.
func pauseStatus(p *v1alpha1.StagePause, key string, covered int32) *v1alpha1.StagePauseStatus {
	want := p.Status.DeepCopy()
	shards := maps.Clone(want.Shards)
	if shards == nil {
		shards = map[string]int32{}
	}
	if covered > 0 {
		shards[key] = covered
	} else {
		delete(shards, key)
	}
	if gone := supersededKey(key); gone != "" {
		delete(shards, gone)
	}
	want.Shards = nil
	if len(shards) > 0 {
		want.Shards = shards
	}
	want.Stages = stagesOf(want.Shards)
	if want.Since == nil {
		since := p.CreationTimestamp
		want.Since = &since
	}
	cond := metav1.Condition{Type: v1alpha1.ConditionActive, Status: metav1.ConditionTrue, Reason: "Covering",
		Message: fmt.Sprintf("pauses %d Stage(s)", want.Stages), ObservedGeneration: p.Generation}
	if want.Stages == 0 {
		// No operator has such a Stage: one that lacks it while another
		// has it says nothing.
		cond.Status, cond.Reason = metav1.ConditionFalse, "StageNotFound"
		cond.Message = fmt.Sprintf("no Stage %q in namespace %s yet; the pause applies as soon as one appears", p.Spec.Stage, p.Namespace)
	}
	meta.SetStatusCondition(&want.Conditions, cond)
	return want
}

// stagesOf is status.stages for the counts of status.shards: the unsharded
// operator's count when it is the larger, else the sum of the shards'. An
// unsharded operator sees every Stage, so its count is never below the sum
// of the shards that run beside it, and equals it once every shard runs.
func stagesOf(shards map[string]int32) int32 {
	var sum int32
	for key, n := range shards {
		if key != unshardedKey {
			sum += n
		}
	}
	return max(sum, shards[unshardedKey])
}

// statusPatch is the merge patch that takes p's status to want: it names
// only the keys of status.shards that this operator (key) owns (null
// removes one, or the whole map when none is left), and is conditional on
// p's resourceVersion, from which want was computed.
func statusPatch(p *v1alpha1.StagePause, key string, want *v1alpha1.StagePauseStatus) map[string]any {
	status := map[string]any{"since": want.Since, "stages": want.Stages, "conditions": want.Conditions}
	patch := map[string]any{"status": status, "metadata": map[string]any{"resourceVersion": p.ResourceVersion}}
	if len(want.Shards) == 0 {
		if len(p.Status.Shards) > 0 {
			status["shards"] = nil
		}
		return patch
	}
	changed := map[string]any{}
	for _, k := range []string{key, supersededKey(key)} {
		n, wanted := want.Shards[k]
		had, present := p.Status.Shards[k]
		switch {
		case k == "" || (wanted == present && n == had):
		case wanted:
			changed[k] = n
		default:
			changed[k] = nil
		}
	}
	if len(changed) > 0 {
		status["shards"] = changed
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
