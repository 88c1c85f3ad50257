package e2e

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// upgradePause is the project-wide pause of TestShardUpgradeSettlesPauseStatus.
const upgradePause = "everything"

// overlapWindow is how long TestShardUpgradeSettlesPauseStatus watches the
// unsharded operator and shard eu's run side by side, once both are idle
// after processing the pause, as during an upgrade's rollout.
const overlapWindow = time.Minute

// maxSettlingWrites is how many times the pause's status may be written
// while it settles after an operator joins: one write of the newcomer's
// key, and a retry or two after a conflict with a write of the other.
const maxSettlingWrites = 3

// TestShardUpgradeSettlesPauseStatus follows docs/shards.md's upgrade from an
// unsharded operator to shards, in a project whose Stages Kargo already
// shards (4 of 10 in eu) under a project-wide pause.
//  1. The operator of shard eu starts beside the unsharded one, each
//     leading its own Lease: once both processed the pause, its status was
//     written a handful of times at most and holds both counts, and in the
//     minute both then run side by side no one writes it again;
//     status.stages stays 10 throughout.
//  2. The main Deployment's rollout: the operator of the unlabelled Stages
//     (--default-shard) starts and stands by on the unsharded operator's
//     Lease, writing nothing; the unsharded operator then stops (SIGTERM,
//     releasing the Lease), and its successor takes the Lease over: the
//     status settles with the counts of the shards, the unsharded one
//     dropped, and status.stages still 10.
//  3. Shard eu is retired: its operator stops, and its key stays until a
//     person removes it (the command of docs/shards.md's step 5); the operator of the
//     unlabelled Stages then writes status.stages 6 at once.
//
// Each settled status is written by no one after every operator looked
// at the pause again.
func TestShardUpgradeSettlesPauseStatus(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	// The Leases are this test's own (TestShards runs the default ones),
	// shared as the default names share them: the unsharded operator's
	// is its successor's, and shard eu's is another.
	lease := "e2e-" + ns
	stages := map[string]*driver.Stage{}
	for i := range 10 {
		name, opts := fmt.Sprintf("d%d", i+1), []driver.StageOption(nil)
		if i >= 6 {
			name, opts = fmt.Sprintf("eu%d", i-5), []driver.StageOption{driver.WithShard("eu")}
		}
		s, err := env.kargo.CreateStage(ctx, ns, name, nil, opts...)
		must(t, err)
		stages[name] = s
	}
	unsharded := startShardOp(t, ns, "unsharded", "--leader-election-id", lease)

	// Before the upgrade: the unsharded operator counts all 10 Stages.
	writes := watchPauseStatus(t, ns, upgradePause)
	seesPause(t, "the project-wide pause", []*shardOp{unsharded}, func() error {
		return createPause(env.dev, pause(ns, upgradePause, v1alpha1.AllStages, v1alpha1.ReasonProjectPause))
	})
	waitFor(t, "the unsharded operator to count the pause's 10 Stages", func() bool {
		return pauseStatusOf(t, ns, upgradePause).Stages == 10 && pauseCondition(t, ns, upgradePause) == "True/Covering"
	})

	// 1. Shard eu's operator joins. Both have processed the pause once
	// eu's count is written, the unsharded operator was told of that
	// write, and both are idle.
	before, toldBefore := writes.count(), unsharded.pauseQueueAdds(t)
	eu := startShardOp(t, ns, "eu", "--shard", "eu", "--leader-election-id", lease+"-eu")
	waitFor(t, "shard eu's operator to write its count, and the unsharded one to be told of it", func() bool {
		return slices.ContainsFunc(writes.since(before), func(s string) bool { return strings.Contains(s, `"eu":4`) }) &&
			unsharded.pauseQueueAdds(t) > toldBefore
	})
	waitIdle(t, unsharded, 0)
	waitIdle(t, eu, 0)
	checkSettlingWrites(t, "shard eu's operator joined", writes.since(before))
	// Both run side by side, as during the rollout: no one writes.
	settled := writes.count()
	for observed := time.Now(); time.Since(observed) < overlapWindow; time.Sleep(250 * time.Millisecond) {
		if n := writes.count(); n != settled {
			t.Fatalf("%v after both operators settled, the pause's status was written again (a write fight): %v",
				time.Since(observed).Round(time.Second), writes.since(settled))
		}
	}
	both := map[string]int32{"*": 10, "eu": 4}
	checkSettled(t, ns, writes, []*shardOp{unsharded, eu}, both, 10)
	for name, s := range stages {
		if !paused(t, s) {
			t.Errorf("Stage %s is not paused", name)
		}
	}

	// 2. The rollout of the main Deployment: its new replica, with
	// --default-shard, starts and stands by on the Lease (its caches,
	// synced, hold the unlabelled Stages, and it writes nothing) ...
	before = writes.count()
	def := startShardOp(t, ns, "default", "--default-shard", "--leader-election-id", lease)
	unlabelled := []string{"d1", "d2", "d3", "d4", "d5", "d6"}
	waitFor(t, "the standby of the unlabelled Stages to cache them", func() bool { return slices.Equal(def.cachedStages(t), unlabelled) })
	if n := def.pauseQueueAdds(t); n != 0 || writes.count() != before {
		t.Errorf("the standby queued %v pause syncs, and the status was written %d times: %v", n, writes.count()-before, writes.since(before))
	}
	// ... and the old replica stops, releasing the Lease to it.
	unsharded.p.stop()
	sharded := map[string]int32{"default": 6, "eu": 4}
	waitFor(t, "the operator of the unlabelled Stages to replace the unsharded count with its own", func() bool {
		return slices.ContainsFunc(writes.since(before), func(s string) bool { return strings.Contains(s, `"default":6`) })
	})
	waitIdle(t, def, 0)
	waitIdle(t, eu, 0)
	checkSettlingWrites(t, "the unsharded operator's successor took the Lease", writes.since(before))
	checkSettled(t, ns, writes, []*shardOp{def, eu}, sharded, 10)

	// 3. Shard eu is retired: its key stays until a person removes it, as
	// step 5 of docs/shards.md says. The remaining operator fixes status.stages at
	// once.
	eu.p.stop()
	before = writes.count()
	seesPause(t, "the removal of the retired shard's key", []*shardOp{def}, func() error {
		_, err := env.dyn.Resource(v1alpha1.StagePausesResource).Namespace(ns).Patch(ctx, upgradePause, types.MergePatchType,
			[]byte(`{"status":{"shards":{"eu":null}}}`), metav1.PatchOptions{}, "status")
		return err
	})
	waitFor(t, "the operator of the unlabelled Stages to write status.stages 6", func() bool {
		return slices.ContainsFunc(writes.since(before), func(s string) bool { return countsStages(s, 6) })
	})
	if changes := writes.since(before); len(changes) != 2 {
		t.Errorf("the status was written %d times after the removal, want 2 (the removal, and status.stages): %v", len(changes), changes)
	}
	checkSettled(t, ns, writes, []*shardOp{def}, map[string]int32{"default": 6}, 6)
}

// checkSettlingWrites: the pause's status was written at least once, at
// most maxSettlingWrites times, after what happened, and each of those
// writes counts 10 Stages.
func checkSettlingWrites(t *testing.T, what string, changes []string) {
	t.Helper()
	if n := len(changes); n < 1 || n > maxSettlingWrites {
		t.Errorf("after %s the pause's status was written %d times, want 1 to %d: %v", what, n, maxSettlingWrites, changes)
	} else {
		t.Logf("after %s the pause's status was written %d times", what, n)
	}
	checkStagesStayed(t, changes)
}

// checkSettled: the pause upgradePause of ns counts shards and stages
// Stages, and once every operator of ops looked at it again (a label
// changes, which none reads), no one wrote its status.
func checkSettled(t *testing.T, ns string, writes *statusWrites, ops []*shardOp, shards map[string]int32, stages int32) {
	t.Helper()
	for _, o := range ops {
		waitIdle(t, o, 0)
	}
	st := pauseStatusOf(t, ns, upgradePause)
	if !maps.Equal(st.Shards, shards) || st.Stages != stages || pauseCondition(t, ns, upgradePause) != "True/Covering" {
		t.Errorf("status shards %v, stages %d, Active %s; want %v, %d, True/Covering", st.Shards, st.Stages, pauseCondition(t, ns, upgradePause), shards, stages)
	}
	settled := writes.count()
	seesPause(t, "a change of the pause's labels", ops, func() error {
		_, err := env.dyn.Resource(v1alpha1.StagePausesResource).Namespace(ns).Patch(ctx, upgradePause, types.MergePatchType,
			fmt.Appendf(nil, `{"metadata":{"labels":{"e2e-nudge":%q}}}`, time.Now().Format("150405.000000")), metav1.PatchOptions{})
		return err
	})
	if n := writes.count(); n != settled {
		t.Errorf("the settled status was written %d more times: %v", n-settled, writes.since(settled))
	}
}

// checkStagesStayed: each status of changes counts the 10 Stages.
func checkStagesStayed(t *testing.T, changes []string) {
	t.Helper()
	for _, s := range changes {
		if !countsStages(s, 10) {
			t.Errorf("status.stages left 10: %s", s)
		}
	}
}

// countsStages: the status, as JSON, says stages n.
func countsStages(status string, n int32) bool {
	var st v1alpha1.StagePauseStatus
	return json.Unmarshal([]byte(status), &st) == nil && st.Stages == n
}

// stop ends the process as Kubernetes ends a pod (SIGTERM), so that it
// releases its Lease, and waits for it.
func (p *process) stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	<-p.done
	p.cmd = nil
}
