package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

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
