package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/metrics"
)

// shardCluster is one fake API server shared by the operators of several
// shards, as one real cluster is.
type shardCluster struct {
	t      *testing.T
	client *dynamicfake.FakeDynamicClient

	mu sync.Mutex
	// Requests seen: label selectors of Stage lists and watches, and the
	// bodies of StagePause status patches.
	stageLists, stageWatches []string
	pauseStatusPatches       []map[string]any
	stagePatches             []string // names of the Stages patched
	lastVersion              int      // the last resourceVersion a guarded write gave
	// afterWrite, if set, is told of each StagePause status patch the
	// server took, and whether it was conditional on a resourceVersion.
	afterWrite func(conditional bool)
}

func newShardCluster(t *testing.T, objects ...*unstructured.Unstructured) *shardCluster {
	t.Helper()
	objs := make([]runtime.Object, len(objects))
	for i, o := range objects {
		objs[i] = o
	}
	sc := &shardCluster{t: t, client: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		kargo.StagesResource:         "StageList",
		kargo.PromotionsResource:     "PromotionList",
		v1alpha1.StagePausesResource: "StagePauseList",
	}, objs...)}
	sc.filterWatchesByLabel()
	sc.guardPauseStatusWrites()
	sc.client.PrependReactor("list", "stages", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sc.mu.Lock()
		defer sc.mu.Unlock()
		sc.stageLists = append(sc.stageLists, a.(k8stesting.ListAction).GetListRestrictions().Labels.String())
		return false, nil, nil
	})
	sc.client.PrependWatchReactor("stages", func(a k8stesting.Action) (bool, watch.Interface, error) {
		sc.mu.Lock()
		defer sc.mu.Unlock()
		sc.stageWatches = append(sc.stageWatches, a.(k8stesting.WatchAction).GetWatchRestrictions().Labels.String())
		return false, nil, nil
	})
	sc.client.PrependReactor("patch", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.PatchAction)
		sc.mu.Lock()
		defer sc.mu.Unlock()
		switch {
		case p.GetResource() == kargo.StagesResource:
			sc.stagePatches = append(sc.stagePatches, p.GetName())
		case p.GetResource() == v1alpha1.StagePausesResource && p.GetSubresource() == "status":
			var body map[string]any
			if err := json.Unmarshal(p.GetPatch(), &body); err != nil {
				sc.t.Errorf("a StagePause status patch is no JSON: %v", err)
			}
			sc.pauseStatusPatches = append(sc.pauseStatusPatches, body)
		}
		return false, nil, nil
	})
	return sc
}

// filterWatchesByLabel makes the fake's watches filter by their label
// selector, as the API server does (the fake filters only lists): an
// object that no longer matches is deleted for that watch.
func (sc *shardCluster) filterWatchesByLabel() {
	sc.client.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		wa, ok := a.(k8stesting.WatchActionImpl)
		if !ok {
			return false, nil, nil
		}
		selector := wa.GetWatchRestrictions().Labels
		if selector == nil || selector.Empty() {
			return false, nil, nil
		}
		w, err := sc.client.Tracker().Watch(a.GetResource(), a.GetNamespace(), wa.ListOptions)
		if err != nil {
			return true, nil, err
		}
		return true, watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
			m, err := meta.Accessor(e.Object)
			if err != nil || e.Type == watch.Deleted || selector.Matches(labels.Set(m.GetLabels())) {
				return e, true
			}
			e.Type = watch.Deleted
			return e, true
		}), nil
	})
}

// guardPauseStatusWrites makes StagePause status patches behave as on the
// API server (the fake ignores resourceVersions): one that names a
// resourceVersion other than the stored one conflicts, and each write
// gives the pause a new resourceVersion.
func (sc *shardCluster) guardPauseStatusWrites() {
	apply := k8stesting.ObjectReaction(sc.client.Tracker())
	sc.lastVersion = 100
	sc.client.PrependReactor("patch", "stagepauses", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.PatchAction)
		if p.GetSubresource() != "status" {
			return false, nil, nil
		}
		var body struct {
			Metadata struct {
				ResourceVersion *string `json:"resourceVersion"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(p.GetPatch(), &body); err != nil {
			return true, nil, apierrors.NewBadRequest(err.Error())
		}
		stored, err := sc.client.Tracker().Get(p.GetResource(), p.GetNamespace(), p.GetName())
		if err != nil {
			return true, nil, err
		}
		storedMeta, err := meta.Accessor(stored)
		if err != nil {
			return true, nil, err
		}
		if rv := body.Metadata.ResourceVersion; rv != nil && *rv != storedMeta.GetResourceVersion() {
			return true, nil, apierrors.NewConflict(v1alpha1.StagePausesResource.GroupResource(), p.GetName(), fmt.Errorf("the object has been modified"))
		}
		_, patched, err := apply(a)
		if err != nil {
			return true, nil, err
		}
		m, err := meta.Accessor(patched)
		if err != nil {
			return true, nil, err
		}
		sc.mu.Lock()
		sc.lastVersion++
		m.SetResourceVersion(strconv.Itoa(sc.lastVersion))
		afterWrite := sc.afterWrite
		sc.mu.Unlock()
		if err := sc.client.Tracker().Update(p.GetResource(), patched, p.GetNamespace()); err != nil {
			return true, nil, err
		}
		if afterWrite != nil {
			afterWrite(body.Metadata.ResourceVersion != nil)
		}
		return true, patched, nil
	})
}

// shardPause is a StagePause as the API server stores it: with its
// creation time, which status.since falls back to.
func shardPause(name, stage, reason string) *unstructured.Unstructured {
	p := stagePause(name, stage, reason)
	p.SetCreationTimestamp(metav1.NewTime(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)))
	return p
}

// shardOperator is one shard's controller, running as leader.
type shardOperator struct {
	c        *Controller
	reg      *prometheus.Registry
	recorder *record.FakeRecorder
}

// start runs the operator of a shard as leader; configure may change its
// Config (a fake clock, say).
func (sc *shardCluster) start(shard string, defaultShard bool, configure ...func(*Config)) *shardOperator {
	sc.t.Helper()
	op := &shardOperator{reg: prometheus.NewRegistry(), recorder: record.NewFakeRecorder(100)}
	cfg := Config{
		Dynamic:      sc.client,
		Kube:         kubefake.NewClientset(),
		Recorder:     op.recorder,
		Shard:        shard,
		DefaultShard: defaultShard,
		Defaults:     latch.Settings{LatchDeadline: time.Minute, DegradedGrace: time.Minute},
		Metrics:      metrics.New(op.reg, "test"),
		// For idle: the queues' adds and finished work.
		QueueMetrics: metrics.NewWorkqueueProvider(op.reg),
	}
	for _, f := range configure {
		f(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		sc.t.Fatal(err)
	}
	op.c = c
	_, ctx := ktesting.NewTestContext(sc.t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	sc.t.Cleanup(func() { cancel(); <-done })
	waitUntil(sc.t, c.HasSynced)
	return op
}

func (sc *shardCluster) seen() (lists, watches []string, pausePatches []map[string]any, stagePatches []string) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return slices.Clone(sc.stageLists), slices.Clone(sc.stageWatches), slices.Clone(sc.pauseStatusPatches), slices.Clone(sc.stagePatches)
}

// pauseStatus reads a StagePause's status on the server.
func (sc *shardCluster) pauseStatus(name string) v1alpha1.StagePauseStatus {
	sc.t.Helper()
	u, err := sc.client.Resource(v1alpha1.StagePausesResource).Namespace("shop").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		sc.t.Fatal(err)
	}
	p := &v1alpha1.StagePause{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p); err != nil {
		sc.t.Fatal(err)
	}
	return p.Status
}

// cachedPause is the StagePause as op's cache shows it.
func (op *shardOperator) cachedPause(name string) *v1alpha1.StagePause {
	obj, ok, err := op.c.informerFor(op.c.pauseInformers, "shop").GetIndexer().GetByKey("shop/" + name)
	if err != nil || !ok {
		return nil
	}
	return obj.(*v1alpha1.StagePause)
}

func (op *shardOperator) cachedStageNames() []string {
	var names []string
	for _, s := range op.c.stagesIn("shop") {
		names = append(names, s.Name)
	}
	slices.Sort(names)
	return names
}

// shardStage is a latchable Stage in a shard; no shard leaves it unlabelled.
func shardStage(name, shard string) *unstructured.Unstructured {
	s := healthyStage(name, nil)
	s.SetUID(types.UID("uid-" + name))
	if shard != "" {
		s.SetLabels(map[string]string{kargo.ShardLabel: shard})
	}
	return s
}

func activeCondition(st v1alpha1.StagePauseStatus) string {
	c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionActive)
	if c == nil {
		return ""
	}
	return string(c.Status) + "/" + c.Reason
}

// Each shard selector becomes the label selector of a list and a watch of
// Stages, two of each for a shard that also takes the unlabelled Stages;
// unsharded, one of each selects everything. Each cache has its own name
// in the readiness.
func TestShardSelectorsReachTheListAndWatch(t *testing.T) {
	for name, tc := range map[string]struct {
		shard        string
		defaultShard bool
		want         []string
	}{
		"unsharded":         {want: []string{""}},
		"shard":             {shard: "a", want: []string{"kargo.akuity.io/shard=a"}},
		"default shard":     {defaultShard: true, want: []string{"!kargo.akuity.io/shard"}},
		"shard and default": {shard: "a", defaultShard: true, want: []string{"!kargo.akuity.io/shard", "kargo.akuity.io/shard=a"}},
	} {
		t.Run(name, func(t *testing.T) {
			sc := newShardCluster(t)
			op := sc.start(tc.shard, tc.defaultShard)
			waitUntil(t, func() bool { _, watches, _, _ := sc.seen(); return len(watches) >= len(tc.want) })
			lists, watches, _, _ := sc.seen()
			slices.Sort(lists)
			slices.Sort(watches)
			if !slices.Equal(lists, tc.want) || !slices.Equal(watches, tc.want) {
				t.Errorf("Stage lists select %q and watches %q, want %q each", lists, watches, tc.want)
			}
			var names []string
			for _, wc := range op.c.caches {
				if strings.HasPrefix(wc.name, "stages.") {
					names = append(names, wc.name)
				}
			}
			if len(names) != len(tc.want) || len(slices.Compact(slices.Sorted(slices.Values(names)))) != len(names) {
				t.Errorf("Stage cache names %q: want %d distinct", names, len(tc.want))
			}
		})
	}
}

// An operator of shard a and of the unlabelled Stages caches, queues and
// judges the Stages of both selections, found by any lookup, and never
// sees shard b's.
func TestUnionOfShardsIsOneView(t *testing.T) {
	sc := newShardCluster(t, shardStage("x", "a"), shardStage("y", ""), shardStage("z", "b"))
	op := sc.start("a", true)
	for _, name := range []string{"x", "y"} {
		waitUntil(t, func() bool {
			s, ok, err := op.c.stageByKey(cacheKey(name))
			return err == nil && ok && latchPhase(s) == latch.PhaseLatched
		})
	}
	if _, ok, err := op.c.stageByKey(cacheKey("z")); ok || err != nil {
		t.Errorf("shard b's Stage z found (%v, %v)", ok, err)
	}
	if got := op.cachedStageNames(); !slices.Equal(got, []string{"x", "y"}) {
		t.Errorf("stagesIn = %q, want [x y]", got)
	}
	var gauged []string
	for st := range newStageStates(op.c).all {
		gauged = append(gauged, st.Stage)
	}
	slices.Sort(gauged)
	if !slices.Equal(gauged, []string{"x", "y"}) {
		t.Errorf("gauges for %q, want [x y]", gauged)
	}
	_, _, _, patched := sc.seen()
	if slices.Contains(patched, "z") {
		t.Errorf("shard b's Stage z was written: %q", patched)
	}
}

func latchPhase(s *kargo.Stage) latch.Phase {
	r, err := latch.Decode(s.State.Value())
	if err != nil {
		return ""
	}
	return r.Phase
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
		if _, err := op.c.syncPauseStatus(context.Background(), cacheKey("all")); err != nil {
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
	if _, err := d.c.syncPauseStatus(context.Background(), cacheKey("hold")); err != nil {
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
		if ok && len(shards) != 1 && !slices.Equal(keys, []string{unshardedKey, "default"}) {
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
			if _, err := a.c.syncPauseStatus(context.Background(), cacheKey("x-failed")); err != nil {
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

// A Stage relabelled into another shard leaves this operator's caches (the
// API server sends a delete) and is forgotten; the other shard's operator
// caches it.
func TestStageLeavingTheShardIsForgotten(t *testing.T) {
	sc := newShardCluster(t, shardStage("m", "a"))
	a, b := sc.start("a", false), sc.start("b", false)
	waitUntil(t, func() bool {
		s, ok, _ := a.c.stageByKey(cacheKey("m"))
		return ok && latchPhase(s) == latch.PhaseLatched
	})
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:"b"}}}`, kargo.ShardLabel)
	if _, err := sc.client.Resource(kargo.StagesResource).Namespace("shop").Patch(context.Background(), "m", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool {
		_, inB, _ := b.c.stageByKey(cacheKey("m"))
		_, inA, _ := a.c.stageByKey(cacheKey("m"))
		return inB && !inA
	})
	waitUntil(t, func() bool {
		a.c.memos.mu.Lock()
		defer a.c.memos.mu.Unlock()
		_, remembered := a.c.memos.m[cacheKey("m")]
		return !remembered
	})
}

// servesLabels tells a live Stage of this operator's shard from another's.
func TestServesLabels(t *testing.T) {
	for _, tc := range []struct {
		shard        string
		defaultShard bool
		labels       map[string]string
		want         bool
	}{
		{"", false, map[string]string{kargo.ShardLabel: "x"}, true},
		{"a", false, map[string]string{kargo.ShardLabel: "a"}, true},
		{"a", false, map[string]string{kargo.ShardLabel: "b"}, false},
		{"a", false, nil, false},
		{"", true, nil, true},
		{"", true, map[string]string{kargo.ShardLabel: "a"}, false},
		{"a", true, nil, true},
		{"a", true, map[string]string{kargo.ShardLabel: "b"}, false},
	} {
		c := &Controller{selectors: shardSelectors(tc.shard, tc.defaultShard)}
		if got := c.servesLabels(tc.labels); got != tc.want {
			t.Errorf("shard %q default %v: servesLabels(%v) = %v, want %v", tc.shard, tc.defaultShard, tc.labels, got, tc.want)
		}
	}
}
