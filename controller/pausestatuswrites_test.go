package controller

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
)

// idle waits until op has nothing queued or being synced, its work
// unchanged for idleMoment (as fixture.idle).
func (op *shardOperator) idle(t *testing.T) {
	t.Helper()
	last, since := [2]float64{-1, -1}, time.Now()
	waitUntil(t, func() bool {
		w := [2]float64{op.sum(t, "kargo_latch_workqueue_adds_total", ""), op.sum(t, "kargo_latch_workqueue_work_duration_seconds", "")}
		if w[0] != w[1] || w != last {
			last, since = w, time.Now()
			return false
		}
		return time.Since(since) >= idleMoment
	})
}

// sum adds up the series of a metric family of op (a histogram's sample
// counts), of the work queue named queue when it is not "".
func (op *shardOperator) sum(t *testing.T, family, queue string) float64 {
	t.Helper()
	mfs, err := op.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != family {
			continue
		}
		for _, m := range mf.GetMetric() {
			if queue != "" && !hasLabel(m.GetLabel(), "name", queue) {
				continue
			}
			n += m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	return n
}

func hasLabel(labels []*dto.LabelPair, name, value string) bool {
	for _, l := range labels {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// nudge changes a label of the pause name, which no operator reads, and
// waits until each of ops was told of it and is idle.
func (sc *shardCluster) nudge(name string, ops ...*shardOperator) {
	sc.t.Helper()
	before := make([]float64, len(ops))
	for i, op := range ops {
		before[i] = op.sum(sc.t, "kargo_latch_workqueue_adds_total", "stagepauses")
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{"nudge":%q}}}`, time.Now().Format("150405.000000"))
	if _, err := sc.client.Resource(v1alpha1.StagePausesResource).Namespace("shop").Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		sc.t.Fatal(err)
	}
	for i, op := range ops {
		waitUntil(sc.t, func() bool { return op.sum(sc.t, "kargo_latch_workqueue_adds_total", "stagepauses") > before[i] })
		op.idle(sc.t)
	}
}

// countWrites counts the StagePause status writes the server takes from
// now on: the patches that did not conflict.
func (sc *shardCluster) countWrites() func() int {
	var mu sync.Mutex
	n := 0
	sc.mu.Lock()
	sc.afterWrite = func(bool) { mu.Lock(); n++; mu.Unlock() }
	sc.mu.Unlock()
	return func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// The unsharded operator and the operator of the unlabelled Stages lead at
// once (no leader election, or a Lease each): each removes the other's key
// once, then keeps it. They settle at {"*": 3, default: 2}, status.stages
// the unsharded count, in 4 writes at most, and write nothing after.
func TestUnshardedAndDefaultOperatorsLeadingAtOnceSettle(t *testing.T) {
	sc := newShardCluster(t, shardStage("d1", ""), shardStage("d2", ""), shardStage("eu1", "eu"),
		shardPause("all", v1alpha1.AllStages, v1alpha1.ReasonProjectPause))
	writes := sc.countWrites()
	unsharded := sc.start("", false)
	waitUntil(t, func() bool { return maps.Equal(sc.pauseStatus("all").Shards, map[string]int32{"*": 3}) })
	unsharded.idle(t)
	def := sc.start("", true)
	settled := func(st v1alpha1.StagePauseStatus) bool {
		return maps.Equal(st.Shards, map[string]int32{"*": 3, "default": 2}) && st.Stages == 3 && activeCondition(st) == "True/Covering"
	}
	waitUntil(t, func() bool { return settled(sc.pauseStatus("all")) })
	unsharded.idle(t)
	def.idle(t)
	_, _, patches, _ := sc.seen()
	// Each removes the other's key once, and writes its own back once:
	// 4 writes (and a retry or two of one computed from a cache behind
	// the last write, which conflicts and writes nothing).
	if n := writes(); n > 4 {
		t.Errorf("%d status writes to settle, want 4 at most: %v", n, patches)
	}
	t.Logf("settled in %d status writes (%d patches)", writes(), len(patches))
	sc.nudge("all", unsharded, def)
	if _, _, after, _ := sc.seen(); len(after) != len(patches) {
		t.Errorf("the settled status was written again: %v", after[len(patches):])
	}
	if st := sc.pauseStatus("all"); !settled(st) {
		t.Errorf("status shards %v, stages %d after the nudge", st.Shards, st.Stages)
	}
	checkShardPatches(t, sc)
}

// Back to unsharded: the shards' operators are gone, leaving the counts
// {default: 2, eu: 4}, eu's Stages deleted with the shard. The unsharded
// operator replaces default's count with its own and keeps the retired eu
// key, which counts for nothing: status.stages is the unsharded count,
// also when it falls, and a pause whose Stage is gone says StageNotFound.
func TestBackToUnshardedWithARetiredShardKey(t *testing.T) {
	retired := func(p *unstructured.Unstructured, shards map[string]any, stages int64) *unstructured.Unstructured {
		p.Object["status"] = map[string]any{"stages": stages, "shards": shards}
		return p
	}
	sc := newShardCluster(t, shardStage("d1", ""), shardStage("d2", ""),
		retired(shardPause("all", v1alpha1.AllStages, v1alpha1.ReasonProjectPause), map[string]any{"default": int64(2), "eu": int64(4)}, 6),
		retired(shardPause("hold", "eu1", v1alpha1.ReasonManual), map[string]any{"eu": int64(1)}, 1))
	sc.start("", false)
	counts := func(name string, shards map[string]int32, stages int32, active string) func() bool {
		return func() bool {
			st := sc.pauseStatus(name)
			return maps.Equal(st.Shards, shards) && st.Stages == stages && activeCondition(st) == active
		}
	}
	waitUntil(t, counts("all", map[string]int32{"*": 2, "eu": 4}, 2, "True/Covering"))
	waitUntil(t, counts("hold", map[string]int32{"*": 0, "eu": 1}, 0, "False/StageNotFound"))
	if err := sc.client.Resource(kargo.StagesResource).Namespace("shop").Delete(context.Background(), "d2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, counts("all", map[string]int32{"*": 1, "eu": 4}, 1, "True/Covering"))
	checkShardPatches(t, sc)
}

// oldOperator plays a kargo-latch built before status.shards, unsharded:
// on every change of a pause it sees, it writes the status it wants,
// stages and no shards, unconditionally. It returns the times it wrote.
func (sc *shardCluster) oldOperator(stages int64) func() int {
	sc.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pauses := sc.client.Resource(v1alpha1.StagePausesResource).Namespace("shop")
	w, err := pauses.Watch(ctx, metav1.ListOptions{})
	if err != nil {
		sc.t.Fatal(err)
	}
	var mu sync.Mutex
	writes := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		for e := range w.ResultChan() {
			u, ok := e.Object.(*unstructured.Unstructured)
			if !ok || (e.Type != watch.Added && e.Type != watch.Modified) {
				continue
			}
			_, hasShards, _ := unstructured.NestedFieldNoCopy(u.Object, "status", "shards")
			n, _, _ := unstructured.NestedInt64(u.Object, "status", "stages")
			if !hasShards && n == stages {
				continue
			}
			body := fmt.Sprintf(`{"status":{"stages":%d,"shards":null}}`, stages)
			if _, err := pauses.Patch(ctx, u.GetName(), types.MergePatchType, []byte(body), metav1.PatchOptions{}, "status"); err != nil && ctx.Err() == nil {
				sc.t.Errorf("the old operator's write: %v", err)
			}
			mu.Lock()
			writes++
			mu.Unlock()
		}
	}()
	sc.t.Cleanup(func() { cancel(); w.Stop(); <-done })
	return func() int { mu.Lock(); defer mu.Unlock(); return writes }
}

// An operator built before status.shards still runs, unsharded, beside the
// operator of shard eu (an upgrade that skipped step 1 of docs/shards.md): it removes
// status.shards at each change it sees. Shard eu's operator rewrites its
// count twice at once, then holds its writes of the pause back, longer
// each time up to 5 minutes, with a PauseStatusContested Warning naming
// step 1 and kargo_latch_pause_status_contested_total: over 30 minutes it
// writes about a dozen times, where unchecked the two write thousands of
// times a minute.
func TestOldOperatorUndoingTheCountIsMetWithHeldWrites(t *testing.T) {
	sc := newShardCluster(t, shardStage("eu1", "eu"), shardStage("d1", ""), shardPause("all", v1alpha1.AllStages, v1alpha1.ReasonProjectPause))
	old := sc.oldOperator(2)
	waitUntil(t, func() bool { return old() == 1 })
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	start := clk.Now()
	var mu sync.Mutex
	var written []time.Duration // when shard eu's operator's writes went through, from start
	sc.mu.Lock()
	sc.afterWrite = func(conditional bool) {
		if conditional { // the old operator's writes are not
			mu.Lock()
			written = append(written, clk.Since(start))
			mu.Unlock()
		}
	}
	sc.mu.Unlock()
	writes := func() []time.Duration { mu.Lock(); defer mu.Unlock(); return slices.Clone(written) }
	eu := sc.start("eu", false, func(cfg *Config) { cfg.Clock = clk })
	contested := func() int { return int(eu.sum(t, "kargo_latch_pause_status_contested_total", "")) }
	// Every key the pause queue took is done: a hold's requeue (AddAfter,
	// before Done) is scheduled from the clock as it was, not from a step
	// the test made while the sync that counted the contest was returning.
	// (Work done is read first: both only grow, and work done never
	// exceeds adds, so equal values prove a settled instant between.)
	settled := func() bool {
		done := eu.sum(t, "kargo_latch_workqueue_work_duration_seconds", "stagepauses")
		return eu.sum(t, "kargo_latch_workqueue_adds_total", "stagepauses") == done
	}

	// Three writes, each undone at once: the third undo holds the writes.
	for deadline := time.Now().Add(10 * time.Second); contested() != 1 || !settled(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no hold within 10s, and %d writes of shard eu's operator against %d of the old one's: a write fight", len(writes()), old())
		}
	}
	if n := len(writes()); n != 3 {
		t.Fatalf("%d writes before the first hold, want 3: %v", n, writes())
	}
	// Each hold ends in one more write, undone at once, and a longer hold.
	for clk.Since(start) < 30*time.Minute {
		clk.Step(10 * time.Second)
		if due := eu.heldUntil("all"); !clk.Now().Before(due) {
			n := len(writes())
			waitUntil(t, func() bool { return len(writes()) == n+1 && contested() == n-1 && settled() })
		}
	}
	got := writes()
	var lastTen int
	for _, at := range got {
		if at >= 20*time.Minute {
			lastTen++
		}
	}
	if len(got) > 15 || lastTen > 3 || lastTen == 0 {
		t.Errorf("shard eu's operator wrote %d times in 30 minutes, %d in the last 10; want about a dozen, and one every 5 minutes at the end: %v", len(got), lastTen, got)
	}
	t.Logf("shard eu's operator wrote at %v", got)
	warning := eu.event(t, api.ReasonPauseStatusContested)
	for _, says := range []string{`"eu"`, "Run this version unsharded first", "docs/shards.md", "step 1"} {
		if !strings.Contains(warning, says) {
			t.Errorf("the Warning does not say %s: %s", says, warning)
		}
	}
}

// heldUntil is when op's writes of the pause name may resume.
func (op *shardOperator) heldUntil(name string) time.Time {
	return op.c.pauseStatus.HeldUntil(cacheKey(name))
}

// event returns the first Event of op with reason, passing over others.
func (op *shardOperator) event(t *testing.T, reason string) string {
	t.Helper()
	for {
		select {
		case e := <-op.recorder.Events:
			if strings.HasPrefix(e, "Warning "+reason+" ") {
				return e
			}
		default:
			t.Fatalf("no %s Event", reason)
			return ""
		}
	}
}
