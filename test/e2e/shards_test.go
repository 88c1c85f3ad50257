package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// shardOp is one operator process of a shard: the binary with --shard or
// --default-shard, under leader election with the Lease its flags name.
type shardOp struct {
	name string // for messages: "a (1)", "b", "default"
	ns   string
	p    *process
	url  string // its /metrics
}

func startShardOp(t *testing.T, ns, name string, args ...string) *shardOp {
	t.Helper()
	// The Lease's name is left to the flags: kargo-latch-<shard>, or
	// kargo-latch for the default shard. --v=2 logs each record stored.
	args = append([]string{"--leader-elect", "--leader-election-namespace", "kargo-latch", "--pause-on-failure", "--v=2"}, args...)
	p, url := startMetricsProcess(t, ns, args...)
	return &shardOp{name: name, ns: ns, p: p, url: url}
}

func (o *shardOp) work() (work, error) { return metricsAt(o.url).work() }

// cachedStages lists the Stages of the project this operator exports a
// phase for: those its caches hold (with a record), leader or standby.
func (o *shardOp) cachedStages(t *testing.T) []string {
	t.Helper()
	var out []string
	mf := scrape(t, o.url)["kargo_latch_stage_phase"]
	for _, m := range mf.GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["project"] == o.ns && m.GetGauge().GetValue() == 1 {
			out = append(out, labels["stage"])
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// pauseQueueAdds counts the StagePause status syncs this operator queued:
// how many pause events it was told of while leading.
func (o *shardOp) pauseQueueAdds(t *testing.T) float64 {
	t.Helper()
	return series(scrape(t, o.url), "kargo_latch_workqueue_adds_total", map[string]string{"name": "stagepauses"})[""]
}

// logged counts the lines of this operator's log with message msg about
// the Stage named stage.
func (o *shardOp) logged(t *testing.T, msg, stage string) int {
	t.Helper()
	n := 0
	for line := range strings.SplitSeq(o.p.logText(0), "\n") {
		if strings.Contains(line, fmt.Sprintf("%q", msg)) && strings.Contains(line, fmt.Sprintf("stage=%q", o.ns+"/"+stage)) {
			n++
		}
	}
	return n
}

// Log lines of the operator (controller/pausing/failure.go, controller/store.go).
const (
	logPaused = "Paused the Stage after a failure"
	logStored = "Stored latch record"
)

// seesPause creates a pause with write and waits until each operator of
// ops has been told of it (its pause queue took an item in) and is idle.
func seesPause(t *testing.T, what string, ops []*shardOp, write func() error) {
	t.Helper()
	before := make([]float64, len(ops))
	for i, o := range ops {
		waitIdle(t, o, 0)
		before[i] = o.pauseQueueAdds(t)
	}
	must(t, write())
	for i, o := range ops {
		waitFor(t, "the operator of shard "+o.name+" to be told of "+what, func() bool { return o.pauseQueueAdds(t) > before[i] })
		waitIdle(t, o, 0)
	}
}

// TestShards runs, in one project, the operators of shard a (a leader and a
// standby), of shard b and of the Stages without a shard label, each with
// the Lease its flags name. Each judges, writes and pauses only its own
// Stages; a project-wide pause covers them all and its status counts each
// shard's under its key without a write fight; killing shard a's leader
// disturbs neither b nor default, and a's standby takes a's Stages over;
// a Stage relabelled from a to b moves to b's operator.
func TestShards(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	a1 := startShardOp(t, ns, "a (1)", "--shard", "a")
	a2 := startShardOp(t, ns, "a (2)", "--shard", "a")
	b := startShardOp(t, ns, "b", "--shard", "b")
	def := startShardOp(t, ns, "default", "--default-shard")

	shardOf := map[string]string{"a1": "a", "a2": "a", "a3": "a", "mover": "a", "b1": "b", "b2": "b", "d1": "", "d2": ""}
	stages := map[string]*driver.Stage{}
	for _, name := range slices.Sorted(maps.Keys(shardOf)) {
		var opts []driver.StageOption
		if shard := shardOf[name]; shard != "" {
			opts = append(opts, driver.WithShard(shard))
		}
		s, err := env.kargo.CreateStage(ctx, ns, name, nil, opts...)
		must(t, err)
		stages[name] = s
	}
	// Each Stage latches: its shard's leader judges it (the Leases may
	// first have to expire from an earlier run).
	for _, name := range slices.Sorted(maps.Keys(stages)) {
		_, err := playLatch(stages[name])
		must(t, err)
	}

	// One replica of shard a leads; the other stands by with warm caches.
	syncs := func(o *shardOp) float64 { w, err := o.work(); must(t, err); return w.syncs }
	aLeader, aStandby := a1, a2
	if syncs(a1) == 0 {
		aLeader, aStandby = a2, a1
	}
	if syncs(aLeader) == 0 || syncs(aStandby) != 0 {
		t.Fatalf("shard a syncs per replica: %v and %v; want one leader", syncs(a1), syncs(a2))
	}
	aHolder := leaseHolder("kargo-latch-a")
	for _, lease := range []string{"kargo-latch-a", "kargo-latch-b", "kargo-latch"} {
		if leaseHolder(lease) == "" {
			t.Errorf("Lease %s has no holder", lease)
		}
	}
	leaders := []*shardOp{aLeader, b, def}

	// Each cache holds its shard's Stages only, the standby's too.
	want := map[*shardOp][]string{
		aLeader: {"a1", "a2", "a3", "mover"}, aStandby: {"a1", "a2", "a3", "mover"},
		b: {"b1", "b2"}, def: {"d1", "d2"},
	}
	for o, names := range want {
		waitFor(t, "the operator of shard "+o.name+" to export its Stages", func() bool { return slices.Equal(o.cachedStages(t), names) })
	}

	// A failure in each shard: paused by that shard's operator alone.
	failed := []string{"a1", "b1", "d1"}
	seesPause(t, "the failures' pauses", leaders, func() error {
		for _, name := range failed {
			if _, err := stages[name].StartPromotion(ctx); err != nil {
				return err
			}
			if _, err := stages[name].FinishPromotion(ctx, "Failed"); err != nil {
				return err
			}
		}
		for _, name := range failed {
			if err := pollPaused(stages[name], true); err != nil {
				return err
			}
		}
		return nil
	})
	owner := map[string]*shardOp{"a": aLeader, "b": b, "": def}
	for _, name := range failed {
		if n := pausesFor(t, ns, name); n != 1 {
			t.Errorf("%s: %d StagePauses, want 1", name, n)
		}
		for _, o := range []*shardOp{aLeader, aStandby, b, def} {
			wantLines := 0
			if o == owner[shardOf[name]] {
				wantLines = 1
			}
			if n := o.logged(t, logPaused, name); n != wantLines {
				t.Errorf("the operator of shard %s logged %d pauses of %s, want %d", o.name, n, name, wantLines)
			}
			if o != owner[shardOf[name]] && o != aStandby && (o.logged(t, logStored, name) != 0 || slices.Contains(o.cachedStages(t), name)) {
				t.Errorf("the operator of shard %s, told of %s's pause, cached or wrote the Stage", o.name, name)
			}
		}
	}

	// A project-wide pause covers every shard's Stages; its status counts
	// each shard under its own key and settles.
	writes := watchPauseStatus(t, ns, "all")
	seesPause(t, "the project-wide pause", leaders, func() error {
		return createPause(env.dev, pause(ns, "all", v1alpha1.AllStages, v1alpha1.ReasonProjectPause))
	})
	for _, s := range stages {
		waitPaused(t, s, true)
	}
	wantShards := map[string]int32{"a": 4, "b": 2, "default": 2}
	settled := func() bool {
		st := pauseStatusOf(t, ns, "all")
		return maps.Equal(st.Shards, wantShards) && st.Stages == 8 && pauseCondition(t, ns, "all") == "True/Covering"
	}
	waitFor(t, "the project-wide pause's status to count every shard", settled)
	beforeNudge := writes.count()
	// Every operator looks at the pause again (a label changes, nothing
	// it reads): a settled status is written by no one.
	seesPause(t, "a change of the pause's labels", leaders, func() error {
		_, err := env.dyn.Resource(v1alpha1.StagePausesResource).Namespace(ns).Patch(ctx, "all", types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"e2e-nudge":"1"}}}`), metav1.PatchOptions{})
		return err
	})
	if n := writes.count(); n != beforeNudge || !settled() {
		t.Errorf("the settled status was written %d more times: %v", n-beforeNudge, writes.since(beforeNudge))
	}
	t.Logf("the project-wide pause's status took %d writes to settle, and none after", beforeNudge)
	seesPause(t, "the resume", leaders, func() error { return deletePause(env.lead, ns, "all") })
	for _, name := range []string{"a2", "b2", "d2"} {
		waitPaused(t, stages[name], false)
	}

	// Shard a's leader dies. b and default go on at once; a's Stages wait
	// for its standby, which takes the Lease kargo-latch-a.
	aLeader.p.kill()
	killed := time.Now()
	for _, name := range []string{"b2", "d2", "a2"} {
		_, err := stages[name].StartPromotion(ctx)
		must(t, err)
		_, err = stages[name].FinishPromotion(ctx, "Failed")
		must(t, err)
	}
	for _, name := range []string{"b2", "d2"} {
		waitPaused(t, stages[name], true)
		if holder := leaseHolder("kargo-latch-a"); holder != aHolder {
			t.Errorf("%s was paused only after shard a's Lease moved (%v after the kill)", name, time.Since(killed))
		}
		t.Logf("%s paused %v after shard a's leader was killed, with shard a leaderless", name, time.Since(killed).Round(time.Millisecond))
	}
	waitLong(t, "shard a's standby to pause a2", time.Minute, func() bool { return paused(t, stages["a2"]) })
	t.Logf("shard a's standby paused a2 %v after the kill", time.Since(killed).Round(time.Millisecond))
	if holder := leaseHolder("kargo-latch-a"); holder == aHolder || holder == "" {
		t.Errorf("Lease kargo-latch-a held by %q after the failover, want the standby", holder)
	}
	if aStandby.logged(t, logPaused, "a2") != 1 || b.logged(t, logPaused, "a2") != 0 || def.logged(t, logPaused, "a2") != 0 {
		t.Error("a2's failure was not paused by shard a's standby alone")
	}
	for _, name := range []string{"b2", "d2", "a2"} {
		if n := pausesFor(t, ns, name); n != 1 {
			t.Errorf("%s: %d StagePauses, want 1", name, n)
		}
	}

	// A Stage relabelled from a to b leaves a's caches and enters b's.
	aLeader = aStandby
	storedByA := aLeader.logged(t, logStored, "mover")
	must(t, relabelShard(ns, "mover", "b"))
	waitFor(t, "the mover to leave shard a's caches and enter b's", func() bool {
		return !slices.Contains(aLeader.cachedStages(t), "mover") && slices.Contains(b.cachedStages(t), "mover")
	})
	waitIdle(t, aLeader, 0)
	waitIdle(t, b, 0)
	seesPause(t, "the mover's failure", []*shardOp{aLeader, b, def}, func() error {
		if _, err := stages["mover"].StartPromotion(ctx); err != nil {
			return err
		}
		if _, err := stages["mover"].FinishPromotion(ctx, "Failed"); err != nil {
			return err
		}
		return pollPaused(stages["mover"], true)
	})
	if b.logged(t, logPaused, "mover") != 1 || aLeader.logged(t, logPaused, "mover") != 0 {
		t.Error("the relabelled Stage's failure was not paused by shard b's operator alone")
	}
	if n := aLeader.logged(t, logStored, "mover"); n != storedByA {
		t.Errorf("shard a's operator wrote the mover's record %d times after it left the shard", n-storedByA)
	}
	if n := pausesFor(t, ns, "mover"); n != 1 {
		t.Errorf("mover: %d StagePauses, want 1", n)
	}
}

// relabelShard moves a Stage to another shard as Kargo's webhook would
// leave it: spec.shard and the label together.
func relabelShard(ns, stage, shard string) error {
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}},"spec":{"shard":%q}}`, kargo.ShardLabel, shard, shard)
	_, err := env.dyn.Resource(kargo.StagesResource).Namespace(ns).Patch(context.Background(), stage, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	return err
}

func pauseStatusOf(t *testing.T, ns, name string) v1alpha1.StagePauseStatus {
	t.Helper()
	u, err := env.dyn.Resource(v1alpha1.StagePausesResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	must(t, err)
	var p v1alpha1.StagePause
	b, err := json.Marshal(u.Object)
	must(t, err)
	must(t, json.Unmarshal(b, &p))
	return p.Status
}

// statusWrites records each change of a StagePause's status a watch sees.
type statusWrites struct {
	mu      sync.Mutex
	changes []string // each new status, as JSON
}

func (w *statusWrites) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.changes)
}

func (w *statusWrites) since(i int) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.changes[i:])
}

// watchPauseStatus watches the StagePause name (made later) until the test
// ends, and counts the writes that changed its status.
func watchPauseStatus(t *testing.T, ns, name string) *statusWrites {
	t.Helper()
	wctx, cancel := context.WithCancel(ctx)
	w, err := env.dyn.Resource(v1alpha1.StagePausesResource).Namespace(ns).Watch(wctx, metav1.ListOptions{FieldSelector: "metadata.name=" + name})
	must(t, err)
	writes := &statusWrites{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := "null"
		for e := range w.ResultChan() {
			u, ok := e.Object.(*unstructured.Unstructured)
			if !ok || (e.Type != watch.Added && e.Type != watch.Modified) {
				continue
			}
			b, _ := json.Marshal(u.Object["status"])
			if status := string(b); status != last {
				last = status
				writes.mu.Lock()
				writes.changes = append(writes.changes, status)
				writes.mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { cancel(); w.Stop(); <-done })
	return writes
}
