package pausing

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
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/controller/report"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/metrics"
)

// A StagePause is per project, and a project's Stages may be served by
// several operators: one per shard, and, while an installation moves to
// shards, an unsharded one beside them. Each counts the Stages it pauses
// under its own key of status.shards (StatusKey) and writes no other key
// (but, once per leadership term, the one it supersedes: see
// supersededKey and statuswrites.go). status.stages follows from the keys
// alone (stagesOf), and since and the Active condition from the pause and
// status.stages. So every operator computes the same status from the same
// object: one that finds it right writes nothing, and no two undo each
// other. Each write is conditional on the resourceVersion it was computed
// from: an operator that wrote its key meanwhile makes it conflict, and
// the retry computes again from the cache once it shows that write. A
// writer that keeps undoing this operator's key (an operator built before
// status.shards) is met with writes held back, not rewritten at once.

// StatusWriter keeps StagePauses' status (since, stages, shards, the
// Active condition) true to the Stages that exist now; its Sync is the
// work of the controller's StagePause queue. status.drained is written
// when the pause takes effect (the drain). Set the fields, then use it by
// pointer.
type StatusWriter struct {
	// Pause reads a StagePause from the cache: not found when none.
	Pause func(key cache.ObjectName) (*v1alpha1.StagePause, bool, error)
	// Stages lists the cached Stages of a namespace, which the pauses
	// count.
	Stages func(ns string) []*kargo.Stage
	// Term is the current leadership term: a comparable token, new each
	// term, for what the writer remembers of its writes (statuswrites.go).
	Term func() any
	// Dynamic writes the status.
	Dynamic dynamic.Interface
	// Releaser releases a held pause whose Stage is gone.
	Releaser *Releaser
	Report   *report.Reporter
	Metrics  *metrics.Recorder
	Clock    clock.PassiveClock
	// Key is this operator's key in status.shards (StatusKey).
	Key string
	// DryRun writes nothing.
	DryRun bool

	writes pauseWriteLog
}

// Sync keeps the status of the StagePause key true, and releases it when
// it is a deleted pause held for a Stage that is gone. It returns how long
// its writes of that status are held back (0: not held), after which it
// is to be synced again.
func (w *StatusWriter) Sync(ctx context.Context, key cache.ObjectName) (time.Duration, error) {
	p, exists, err := w.Pause(key)
	if err != nil || !exists {
		w.writes.forget(key)
		return 0, err
	}
	if p.DeletionTimestamp != nil {
		if p.HeldForResume() {
			return 0, w.Releaser.ReleaseOrphan(ctx, p)
		}
		return 0, nil
	}
	var covered int32
	for _, s := range w.Stages(p.Namespace) {
		if p.Covers(s.Name) {
			covered++
		}
	}
	term, now := w.Term(), w.Clock.Now()
	held, undos := w.writes.observe(term, p, w.Key, now)
	if undos > 0 {
		w.reportContested(ctx, p, undos, held)
	}
	remove := w.writes.supersededToRemove(term, p, w.Key)
	want := pauseStatus(p, w.Key, covered, remove)
	if statusEqual(&p.Status, want) || w.DryRun {
		return 0, nil
	}
	if held > 0 {
		return held, nil
	}
	body, err := json.Marshal(statusPatch(p, w.Key, remove, want))
	if err != nil {
		return 0, err
	}
	_, err = w.Dynamic.Resource(v1alpha1.StagePausesResource).Namespace(p.Namespace).
		Patch(ctx, p.Name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: api.FieldManager}, "status")
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err == nil {
		w.writes.wrote(term, p, w.Key, want, remove, now)
		klog.FromContext(ctx).V(2).Info("Updated StagePause status", "pause", klog.KRef(p.Namespace, p.Name),
			"stages", want.Stages, "key", w.Key, "counted", covered)
	}
	return 0, err
}

// HeldUntil is when this operator's writes of the status of the pause key
// may resume, after another writer kept undoing them; zero when they are
// not held back.
func (w *StatusWriter) HeldUntil(key cache.ObjectName) time.Time {
	return w.writes.heldUntil(key)
}

// reportContested says that another writer undid this operator's count
// in p's status undos times in a row, and that its writes of p's status
// are held back for held.
func (w *StatusWriter) reportContested(ctx context.Context, p *v1alpha1.StagePause, undos int, held time.Duration) {
	w.Metrics.PauseStatusContested.WithLabelValues(p.Namespace).Inc()
	klog.FromContext(ctx).Info("Another writer keeps undoing this operator's count in a StagePause's status; holding writes back",
		"pause", klog.KRef(p.Namespace, p.Name), "key", w.Key, "undos", undos, "heldFor", held)
	// One message per key, so that the Events aggregate into one.
	ref := &corev1.ObjectReference{APIVersion: v1alpha1.GroupVersion.String(), Kind: "StagePause", Namespace: p.Namespace, Name: p.Name, UID: p.UID}
	w.Report.WarnAbout(ref, api.ReasonPauseStatusContested,
		"Another writer keeps removing or changing this operator's count %q in status.shards, each time within %v of its write: "+
			"most likely a kargo-latch built before shards, which removes status.shards whenever it writes. "+
			"Run this version unsharded first (docs/shards.md, Moving to shards, step 1). Until then this operator writes this status at most every %v.",
		w.Key, undoWindow, maxUndoneBackoff)
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
	if covered > 0 || key == UnshardedKey {
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
	if n, ok := shards[UnshardedKey]; ok {
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

// The keys of status.shards. An operator counts under StatusKey: its
// shard's name, DefaultShardKey for the operator of the unlabelled Stages
// alone, and UnshardedKey when unsharded.
const (
	// UnshardedKey is an unsharded operator's key: "*", as spec.stage
	// names every Stage, and no label value, so no shard's name.
	UnshardedKey = "*"
	// DefaultShardKey is the key of the operator of the Stages without a
	// shard label (--default-shard), so no shard may be named so.
	DefaultShardKey = "default"
)

// StatusKey is the key under which the operator of these flags counts the
// Stages a StagePause pauses in status.shards.
func StatusKey(shard string, defaultShard bool) string {
	switch {
	case shard != "":
		return shard
	case defaultShard:
		return DefaultShardKey
	}
	return UnshardedKey
}

// supersededKey is the key of status.shards that the operator counting
// under key removes besides its own: that of the operator it replaces,
// or "". An unsharded operator and the operator of the unlabelled Stages
// alone (--default-shard) both serve those Stages, and take the same Lease
// unless told otherwise: one is the other's successor when an installation
// moves to shards or back, so the other's count is stale. No other
// operator's key is removed by anyone but itself: while the operators of
// the shards start, an unsharded one may well be running.
func supersededKey(key string) string {
	switch key {
	case UnshardedKey:
		return DefaultShardKey
	case DefaultShardKey:
		return UnshardedKey
	}
	return ""
}
