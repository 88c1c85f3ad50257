package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
)

// A StagePause is per project, and a project's Stages may be served by
// several operators: one per shard, and, while an installation moves to
// shards, an unsharded one beside them. Each counts the Stages it pauses
// under its own key of status.shards (statusKey) and writes no other key
// (but, once per leadership term, the one it supersedes: see
// supersededKey and pausewrites.go). status.stages follows from the keys
// alone (stagesOf), and since and the Active condition from the pause and
// status.stages. So every operator computes the same status from the same
// object: one that finds it right writes nothing, and no two undo each
// other. Each write is conditional on the resourceVersion it was computed
// from: an operator that wrote its key meanwhile makes it conflict, and
// the retry computes again from the cache once it shows that write. A
// writer that keeps undoing this operator's key (an operator built before
// status.shards) is met with writes held back, not rewritten at once.

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
		c.pauseWrites.forget(key)
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
	term, now := c.work.Load(), c.clock.Now()
	shardKey := statusKey(c.cfg.Shard, c.cfg.DefaultShard)
	held, undos := c.pauseWrites.observe(term, p, shardKey, now)
	if undos > 0 {
		c.reportContested(ctx, p, shardKey, undos, held)
	}
	remove := c.pauseWrites.supersededToRemove(term, p, shardKey)
	want := pauseStatus(p, shardKey, covered, remove)
	if statusEqual(&p.Status, want) || c.cfg.DryRun {
		return 0, nil
	}
	if held > 0 {
		return held, nil
	}
	body, err := json.Marshal(statusPatch(p, shardKey, remove, want))
	if err != nil {
		return 0, err
	}
	_, err = c.cfg.Dynamic.Resource(v1alpha1.StagePausesResource).Namespace(p.Namespace).
		Patch(ctx, p.Name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: api.FieldManager}, "status")
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err == nil {
		c.pauseWrites.wrote(term, p, shardKey, want, remove, now)
		klog.FromContext(ctx).V(2).Info("Updated StagePause status", "pause", klog.KRef(p.Namespace, p.Name),
			"stages", want.Stages, "key", shardKey, "counted", covered)
	}
	return 0, err
}

// reportContested says that another writer undid this operator's count
// (under key) in p's status undos times in a row, and that its writes of
// p's status are held back for held.
func (c *Controller) reportContested(ctx context.Context, p *v1alpha1.StagePause, key string, undos int, held time.Duration) {
	c.cfg.Metrics.PauseStatusContested.WithLabelValues(p.Namespace).Inc()
	klog.FromContext(ctx).Info("Another writer keeps undoing this operator's count in a StagePause's status; holding writes back",
		"pause", klog.KRef(p.Namespace, p.Name), "key", key, "undos", undos, "heldFor", held)
	// One message per key, so that the Events aggregate into one.
	ref := &corev1.ObjectReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "StagePause", Namespace: p.Namespace, Name: p.Name, UID: p.UID}
	c.report.WarnAbout(ref, api.ReasonPauseStatusContested,
		"Another writer keeps removing or changing this operator's count %q in status.shards, each time within %v of its write: "+
			"most likely a kargo-latch built before shards, which removes status.shards whenever it writes. "+
			"Run this version unsharded first (README, Moving to shards, step 1). Until then this operator writes this status at most every %v.",
		key, undoWindow, maxUndoneBackoff)
}

// pauseStatus is the status p should have when this operator, whose key
// in status.shards is key, counts covered Stages under it, and removes the
// key remove ("" for none). An unsharded operator keeps its key at 0 (its
// count decides status.stages: see stagesOf); another removes its key at 0.
func pauseStatus(p *v1alpha1.StagePause, key string, covered int32, remove string) *v1alpha1.StagePauseStatus {
	want := p.Status.DeepCopy()
	shards := maps.Clone(want.Shards)
	if shards == nil {
		shards = map[string]int32{}
	}
	if covered > 0 || key == unshardedKey {
		shards[key] = covered
	} else {
		delete(shards, key)
	}
	if remove != "" {
		delete(shards, remove)
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
// operator's count when it has one, else the sum of the shards'. An
// unsharded operator sees every Stage, and keeps its key while it runs:
// beside it, the shards' keys add nothing, and a retired shard's key left
// behind counts for nothing either.
func stagesOf(shards map[string]int32) int32 {
	if n, ok := shards[unshardedKey]; ok {
		return n
	}
	var sum int32
	for _, n := range shards {
		sum += n
	}
	return sum
}

// statusPatch is the merge patch that takes p's status to want: it names
// only this operator's key of status.shards and the one it removes (null
// removes one, or the whole map when none is left), and is conditional on
// p's resourceVersion, from which want was computed.
func statusPatch(p *v1alpha1.StagePause, key, remove string, want *v1alpha1.StagePauseStatus) map[string]any {
	status := map[string]any{"since": want.Since, "stages": want.Stages, "conditions": want.Conditions}
	patch := map[string]any{"status": status, "metadata": map[string]any{"resourceVersion": p.ResourceVersion}}
	if len(want.Shards) == 0 {
		if len(p.Status.Shards) > 0 {
			status["shards"] = nil
		}
		return patch
	}
	changed := map[string]any{}
	for _, k := range []string{key, remove} {
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
