package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/controller/pausing"
	"github.com/kargo-latch/kargo-latch/kargo"
)

// An upgrade to shards runs an unsharded operator beside the operator of
// shard eu, each leading its own Lease. Each writes its own count and
// keeps the other's, status.stages is the unsharded count for both, and
// once it is right neither writes again: no write fight.
func TestUnshardedAndShardOperatorsSettle(t *testing.T) {
	sc := newShardCluster(t, shardStage("d1", ""), shardStage("d2", ""), shardStage("eu1", "eu"),
		shardPause("all", v1alpha1.AllStages, v1alpha1.ReasonProjectPause))
	unsharded := sc.start("", false)
	converged := func(want map[string]int32) func(v1alpha1.StagePauseStatus) bool {
		return func(st v1alpha1.StagePauseStatus) bool {
			return maps.Equal(st.Shards, want) && st.Stages == 3 && activeCondition(st) == "True/Covering"
		}
	}
	alone := converged(map[string]int32{"*": 3})
	waitUntil(t, func() bool { return alone(sc.pauseStatus("all")) })
	eu := sc.start("eu", false)
	both := converged(map[string]int32{"*": 3, "eu": 1})
	waitUntil(t, func() bool { return both(sc.pauseStatus("all")) })
	waitUntil(t, func() bool {
		pu, pe := unsharded.cachedPause("all"), eu.cachedPause("all")
		return pu != nil && pe != nil && both(pu.Status) && both(pe.Status)
	})
	_, _, patches, _ := sc.seen()
	if len(patches) > 3 {
		t.Errorf("%d status patches to settle, want 2 (and a retry): %v", len(patches), patches)
	}
	for _, op := range []*shardOperator{unsharded, eu} {
		if _, err := op.c.pauseStatus.Sync(context.Background(), cacheKey("all")); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, after, _ := sc.seen(); len(after) != len(patches) {
		t.Errorf("a settled status was written again: %v", after[len(patches):])
	}
	if st := sc.pauseStatus("all"); !both(st) {
		t.Errorf("status shards %v, stages %d after the settled syncs", st.Shards, st.Stages)
	}
	checkShardPatches(t, sc)
}

// Two shards' operators share a project-wide pause: each writes its own key
// of status.shards, conditionally, and status.stages is the sum; once it is
// right neither writes again.
func TestShardsSumAProjectWidePause(t *testing.T) {
	sc := newShardCluster(t, shardStage("a1", "a"), shardStage("a2", "a"), shardStage("d1", ""), shardStage("b1", "b"),
		shardPause("all", v1alpha1.AllStages, v1alpha1.ReasonProjectPause))
	a, d := sc.start("a", false), sc.start("", true)
	want := map[string]int32{"a": 2, "default": 1} // b's operator does not run: b1 is counted by no one
	converged := func(st v1alpha1.StagePauseStatus) bool {
		return maps.Equal(st.Shards, want) && st.Stages == 3 && activeCondition(st) == "True/Covering"
	}
	waitUntil(t, func() bool { return converged(sc.pauseStatus("all")) })
	checkShardPatches(t, sc)

	// Both caches show the settled status: a sync of either writes nothing.
	waitUntil(t, func() bool {
		pa, pd := a.cachedPause("all"), d.cachedPause("all")
		return pa != nil && pd != nil && converged(pa.Status) && converged(pd.Status)
	})
	_, _, before, _ := sc.seen()
	for _, op := range []*shardOperator{a, d} {
		if _, err := op.c.pauseStatus.Sync(context.Background(), cacheKey("all")); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, after, _ := sc.seen(); len(after) != len(before) {
		t.Errorf("a settled status was written again: %v", after[len(before):])
	}
}

// A status write that conflicts (another shard wrote meanwhile) is retried
// from the fresh pause, counted as a conflict, not as an error.
func TestShardPauseStatusConflictIsRetried(t *testing.T) {
	sc := newShardCluster(t, shardStage("a1", "a"), shardStage("d1", ""), shardPause("all", v1alpha1.AllStages, v1alpha1.ReasonProjectPause))
	conflicts := 1
	sc.client.PrependReactor("patch", "stagepauses", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sc.mu.Lock()
		defer sc.mu.Unlock()
		if a.GetSubresource() != "status" || conflicts == 0 {
			return false, nil, nil
		}
		conflicts--
		return true, nil, apierrors.NewConflict(v1alpha1.StagePausesResource.GroupResource(), "all", fmt.Errorf("the object has been modified"))
	})
	a, d := sc.start("a", false), sc.start("", true)
	waitUntil(t, func() bool {
		st := sc.pauseStatus("all")
		return maps.Equal(st.Shards, map[string]int32{"a": 1, "default": 1}) && st.Stages == 2
	})
	var conflicted, failed float64
	for _, op := range []*shardOperator{a, d} {
		conflicted += unlabeledCounter(t, op.reg, "kargo_latch_write_conflicts_total")
		failed += unlabeledCounter(t, op.reg, "kargo_latch_reconcile_errors_total")
	}
	// The injected conflict, and any the two made racing for the pause.
	if conflicted < 1 || failed != 0 {
		t.Errorf("write conflicts %v, reconcile errors %v; want at least 1 and 0", conflicted, failed)
	}
	checkShardPatches(t, sc)
}

// A pause of one Stage is counted by the shard that has it only; the shard
// without it neither writes a key nor says the Stage is missing. When the
// Stage goes, its shard removes its key: no key is kept at 0.
func TestShardWithoutTheStageDoesNotReportItMissing(t *testing.T) {
	sc := newShardCluster(t, shardStage("a1", "a"), shardStage("d1", ""), shardPause("hold", "a1", v1alpha1.ReasonManual))
	sc.start("a", false)
	d := sc.start("", true)
	waitUntil(t, func() bool {
		st := sc.pauseStatus("hold")
		return maps.Equal(st.Shards, map[string]int32{"a": 1}) && st.Stages == 1 && activeCondition(st) == "True/Covering"
	})
	waitUntil(t, func() bool { p := d.cachedPause("hold"); return p != nil && p.Status.Stages == 1 })
	_, _, before, _ := sc.seen()
	if _, err := d.c.pauseStatus.Sync(context.Background(), cacheKey("hold")); err != nil {
		t.Fatal(err)
	}
	if _, _, after, _ := sc.seen(); len(after) != len(before) {
		t.Errorf("the shard without the Stage wrote %v", after[len(before):])
	}

	if err := sc.client.Resource(kargo.StagesResource).Namespace("shop").Delete(context.Background(), "a1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool {
		st := sc.pauseStatus("hold")
		return st.Shards == nil && st.Stages == 0 && activeCondition(st) == "False/StageNotFound"
	})
	u, err := sc.client.Resource(v1alpha1.StagePausesResource).Namespace("shop").Get(context.Background(), "hold", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if shards, found, _ := unstructured.NestedFieldNoCopy(u.Object, "status", "shards"); found {
		t.Errorf("status.shards = %v after the last Stage went, want no field", shards)
	}
	checkShardPatches(t, sc)
}

// checkShardPatches: every status patch is conditional on a
// resourceVersion and names one key of status.shards at most, or the two
// of the unlabelled Stages' operators (supersededKey).
func checkShardPatches(t *testing.T, sc *shardCluster) {
	t.Helper()
	_, _, patches, _ := sc.seen()
	if len(patches) == 0 {
		t.Fatal("no StagePause status patch")
	}
	for _, p := range patches {
		md, _ := p["metadata"].(map[string]any)
		if _, ok := md["resourceVersion"]; !ok {
			t.Errorf("status patch %v is not conditional on a resourceVersion", p)
		}
		status, _ := p["status"].(map[string]any)
		shards, ok := status["shards"].(map[string]any)
		keys := slices.Sorted(maps.Keys(shards))
		if ok && len(shards) != 1 && !slices.Equal(keys, []string{pausing.UnshardedKey, pausing.DefaultShardKey}) {
			t.Errorf("status patch %v writes the shard keys %q, want its own only (and the one it supersedes)", p, keys)
		}
	}
}

// A failure's pause that someone deleted, held for its Stage's operator to
// record the resume, is not released by the operator of another shard,
// whose caches lack that Stage; a pause whose Stage is gone is.
func TestHeldPauseOfAnotherShardIsNotReleased(t *testing.T) {
	for name, tc := range map[string]struct {
		stageExists bool
		released    bool
	}{
		"Stage in shard b":    {stageExists: true, released: false},
		"Stage gone for good": {stageExists: false, released: true},
	} {
		t.Run(name, func(t *testing.T) {
			held := shardPause("x-failed", "x", "PromotionFailed")
			held.SetFinalizers([]string{v1alpha1.ResumeFinalizer})
			held.SetDeletionTimestamp(&metav1.Time{Time: time.Now()})
			held.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: kargo.GroupVersion.String(), Kind: "Stage", Name: "x", UID: "uid-x"}})
			objects := []*unstructured.Unstructured{held}
			if tc.stageExists {
				objects = append(objects, shardStage("x", "b"))
			}
			sc := newShardCluster(t, objects...)
			a := sc.start("a", false)
			if _, err := a.c.pauseStatus.Sync(context.Background(), cacheKey("x-failed")); err != nil {
				t.Fatal(err)
			}
			u, err := sc.client.Resource(v1alpha1.StagePausesResource).Namespace("shop").Get(context.Background(), "x-failed", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if released := !slices.Contains(u.GetFinalizers(), v1alpha1.ResumeFinalizer); released != tc.released {
				t.Errorf("released %v, want %v", released, tc.released)
			}
		})
	}
}
