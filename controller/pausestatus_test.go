package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
)

// The status an operator wants for a pause, from the status it finds and
// its own count, and the merge patch that writes it.
func TestPauseStatusOfAShard(t *testing.T) {
	created := metav1.NewTime(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC))
	pause := func(shards map[string]int32) *v1alpha1.StagePause {
		p := &v1alpha1.StagePause{Spec: v1alpha1.StagePauseSpec{Stage: "*"}}
		p.CreationTimestamp, p.ResourceVersion = created, "7"
		p.Status.Shards = shards
		return p
	}
	for name, tc := range map[string]struct {
		shards  map[string]int32
		key     string
		covered int32
		remove  string // the superseded key, when it is to be removed
		want    map[string]int32
		stages  int32
		patch   any // status.shards in the patch; absent when nil
	}{
		"first key":         {nil, "a", 2, "", map[string]int32{"a": 2}, 2, map[string]any{"a": float64(2)}},
		"summed":            {map[string]int32{"b": 3}, "a", 2, "", map[string]int32{"a": 2, "b": 3}, 5, map[string]any{"a": float64(2)}},
		"own key to 0":      {map[string]int32{"a": 2, "b": 3}, "a", 0, "", map[string]int32{"b": 3}, 3, map[string]any{"a": nil}},
		"last key to 0":     {map[string]int32{"a": 2}, "a", 0, "", nil, 0, "null"},
		"unchanged own key": {map[string]int32{"a": 2, "b": 3}, "a", 2, "", map[string]int32{"a": 2, "b": 3}, 5, nil},
		"unsharded alone":   {nil, "*", 4, "", map[string]int32{"*": 4}, 4, map[string]any{"*": float64(4)}},
		// An unsharded operator keeps its key at 0: its count, not a
		// retired shard's key, says the pause covers nothing.
		"unsharded at 0":                {nil, "*", 0, "", map[string]int32{"*": 0}, 0, map[string]any{"*": float64(0)}},
		"unsharded at 0, retired shard": {map[string]int32{"eu": 1}, "*", 0, "", map[string]int32{"*": 0, "eu": 1}, 0, map[string]any{"*": float64(0)}},
		// An upgrade to shards: the unsharded operator and shard eu's run
		// side by side. Each keeps the other's count, and both find the
		// unsharded count for status.stages.
		"unsharded beside a shard": {map[string]int32{"eu": 4}, "*", 10, "", map[string]int32{"*": 10, "eu": 4}, 10, map[string]any{"*": float64(10)}},
		"shard beside unsharded":   {map[string]int32{"*": 10}, "eu", 4, "", map[string]int32{"*": 10, "eu": 4}, 10, map[string]any{"eu": float64(4)}},
		"settled side by side":     {map[string]int32{"*": 10, "eu": 4}, "eu", 4, "", map[string]int32{"*": 10, "eu": 4}, 10, nil},
		// Stale shard counts above the unsharded one: the unsharded
		// operator, which sees every Stage, decides.
		"shards above unsharded": {map[string]int32{"eu": 4, "us": 3}, "*", 5, "", map[string]int32{"*": 5, "eu": 4, "us": 3}, 5, map[string]any{"*": float64(5)}},
		// The operator of the unlabelled Stages replaces the unsharded one
		// on its Lease, and drops its count; and the other way back.
		"unsharded replaced": {map[string]int32{"*": 10, "eu": 4}, "default", 6, "*", map[string]int32{"default": 6, "eu": 4}, 10,
			map[string]any{"default": float64(6), "*": nil}},
		"default replaced": {map[string]int32{"default": 6, "eu": 4}, "*", 10, "default", map[string]int32{"*": 10, "eu": 4}, 10,
			map[string]any{"*": float64(10), "default": nil}},
		"unsharded replaced, no Stage": {map[string]int32{"*": 2}, "default", 0, "*", nil, 0, "null"},
		// Both lead at once, and each removed the other's key once: they
		// keep each other's key from then on.
		"default beside unsharded": {map[string]int32{"*": 3}, "default", 2, "", map[string]int32{"*": 3, "default": 2}, 3,
			map[string]any{"default": float64(2)}},
		"unsharded beside default": {map[string]int32{"default": 2}, "*", 3, "", map[string]int32{"*": 3, "default": 2}, 3,
			map[string]any{"*": float64(3)}},
	} {
		t.Run(name, func(t *testing.T) {
			p := pause(tc.shards)
			got := pauseStatus(p, tc.key, tc.covered, tc.remove)
			if !maps.Equal(got.Shards, tc.want) || got.Stages != tc.stages || !got.Since.Equal(&created) {
				t.Errorf("status shards %v, stages %d, since %v; want %v, %d, %v", got.Shards, got.Stages, got.Since, tc.want, tc.stages, created)
			}
			wantActive := "True/Covering"
			if tc.stages == 0 {
				wantActive = "False/StageNotFound"
			}
			if active := activeCondition(*got); active != wantActive {
				t.Errorf("Active %s, want %s", active, wantActive)
			}
			b, err := json.Marshal(statusPatch(p, tc.key, tc.remove, got))
			if err != nil {
				t.Fatal(err)
			}
			var body map[string]any
			if err := json.Unmarshal(b, &body); err != nil {
				t.Fatal(err)
			}
			status := body["status"].(map[string]any)
			shards, named := status["shards"]
			switch {
			case tc.patch == nil && named:
				t.Errorf("patch writes status.shards %v, want none", shards)
			case tc.patch == "null" && (!named || shards != nil):
				t.Errorf("patch writes status.shards %v, want null", shards)
			case tc.patch != nil && tc.patch != "null" && fmt.Sprint(shards) != fmt.Sprint(tc.patch):
				t.Errorf("patch writes status.shards %v, want %v", shards, tc.patch)
			}
			if md, _ := body["metadata"].(map[string]any); md["resourceVersion"] != "7" {
				t.Errorf("patch metadata %v, want it conditional on resourceVersion 7", body["metadata"])
			}
		})
	}
}

// The keys of status.shards, by the operator's flags.
func TestStatusKeys(t *testing.T) {
	for _, tc := range []struct {
		shard              string
		defaultShard       bool
		key, supersededKey string
	}{
		{"", false, "*", "default"},
		{"", true, "default", "*"},
		{"eu", false, "eu", ""},
		{"eu", true, "eu", ""},
	} {
		key := statusKey(tc.shard, tc.defaultShard)
		if key != tc.key || supersededKey(key) != tc.supersededKey {
			t.Errorf("--shard=%q --default-shard=%v: key %q superseding %q, want %q superseding %q",
				tc.shard, tc.defaultShard, key, supersededKey(key), tc.key, tc.supersededKey)
		}
	}
}

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
		if _, err := op.c.syncPauseStatus(context.Background(), cacheKey("all")); err != nil {
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
