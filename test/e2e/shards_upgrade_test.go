package e2e

import (
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

// overlapWindow is how long the unsharded operator and shard eu's run side
// by side in TestShardUpgradeSettlesPauseStatus, as during an upgrade's
// rollout.
const overlapWindow = time.Minute

// maxSettlingWrites is how many times the pause's status may be written
// while it settles after an operator joins: one write of the newcomer's
// key, and a retry or two after a conflict with a write of the other.
const maxSettlingWrites = 3

// TestShardUpgradeSettlesPauseStatus follows the README's upgrade from an
// unsharded operator to shards, in a project whose Stages Kargo already
// shards (4 of 10 in eu) under a project-wide pause.
//  1. The operator of shard eu starts beside the unsharded one, each
//     leading its own Lease, and both run for a minute: the pause's status
//     is written a handful of times at most, and settles with both counts;
//     status.stages stays 10 throughout.
//  2. The unsharded operator is replaced on its Lease by the operator of
//     the unlabelled Stages (--default-shard), as a rolling update does:
//     the status settles with the counts of the shards, the unsharded one
//     dropped, and status.stages still 10.
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

	// 1. Shard eu's operator joins. Both have processed the pause once eu's
	// count is written and the unsharded operator was told of that write.
	before, toldBefore := writes.count(), unsharded.pauseQueueAdds(t)
	joined := time.Now()
	eu := startShardOp(t, ns, "eu", "--shard", "eu", "--leader-election-id", lease+"-eu")
	waitFor(t, "shard eu's operator to write its count, and the unsharded one to be told of it", func() bool {
		return slices.ContainsFunc(writes.since(before), func(s string) bool { return strings.Contains(s, `"eu":4`) }) &&
			unsharded.pauseQueueAdds(t) > toldBefore
	})
	time.Sleep(time.Until(joined.Add(overlapWindow)))
	if n := writes.count() - before; n > maxSettlingWrites {
		changes := writes.since(before)
		t.Errorf("in the %v both operators ran, the pause's status was written %d times, want %d at most (a write fight); the first and last: %s ... %s",
			overlapWindow, n, maxSettlingWrites, changes[0], changes[len(changes)-1])
	} else {
		t.Logf("in the %v both operators ran, the pause's status was written %d times", overlapWindow, n)
	}
	checkStagesStayed(t, writes.since(before))
	both := map[string]int32{"*": 10, "eu": 4}
	checkSettled(t, ns, writes, []*shardOp{unsharded, eu}, both)
	for name, s := range stages {
		if !paused(t, s) {
			t.Errorf("Stage %s is not paused", name)
		}
	}

	// 2. The unsharded operator stops (releasing its Lease) and the
	// operator of the unlabelled Stages takes the Lease over.
	unsharded.p.stop()
	before = writes.count()
	def := startShardOp(t, ns, "default", "--default-shard", "--leader-election-id", lease)
	sharded := map[string]int32{"default": 6, "eu": 4}
	waitFor(t, "the operator of the unlabelled Stages to replace the unsharded count with its own", func() bool {
		st := pauseStatusOf(t, ns, upgradePause)
		return maps.Equal(st.Shards, sharded)
	})
	if n := writes.count() - before; n > maxSettlingWrites {
		t.Errorf("the status was written %d times after the unsharded operator's successor started, want %d at most: %v", n, maxSettlingWrites, writes.since(before))
	} else {
		t.Logf("the unsharded operator's successor settled the status in %d writes", n)
	}
	checkStagesStayed(t, writes.since(before))
	checkSettled(t, ns, writes, []*shardOp{def, eu}, sharded)
}

// checkSettled: the pause upgradePause of ns counts shards and 10
// Stages, and once every operator of ops looked at it again (a label
// changes, which none reads), no one wrote its status.
func checkSettled(t *testing.T, ns string, writes *statusWrites, ops []*shardOp, shards map[string]int32) {
	t.Helper()
	for _, o := range ops {
		waitIdle(t, o, 0)
	}
	st := pauseStatusOf(t, ns, upgradePause)
	if !maps.Equal(st.Shards, shards) || st.Stages != 10 || pauseCondition(t, ns, upgradePause) != "True/Covering" {
		t.Errorf("status shards %v, stages %d, Active %s; want %v, 10, True/Covering", st.Shards, st.Stages, pauseCondition(t, ns, upgradePause), shards)
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
		if !strings.Contains(s, `"stages":10,`) && !strings.HasSuffix(s, `"stages":10}`) {
			t.Errorf("status.stages left 10: %s", s)
		}
	}
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
