package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
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
