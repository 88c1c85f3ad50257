package pausing

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

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
		key := StatusKey(tc.shard, tc.defaultShard)
		if key != tc.key || supersededKey(key) != tc.supersededKey {
			t.Errorf("--shard=%q --default-shard=%v: key %q superseding %q, want %q superseding %q",
				tc.shard, tc.defaultShard, key, supersededKey(key), tc.key, tc.supersededKey)
		}
	}
}

func activeCondition(st v1alpha1.StagePauseStatus) string {
	c := meta.FindStatusCondition(st.Conditions, v1alpha1.ConditionActive)
	if c == nil {
		return ""
	}
	return string(c.Status) + "/" + c.Reason
}

// The operator writes its count once, conditional on the version it
// counted from, and nothing once its cache shows the status right; a dry
// run writes nothing.
func TestSyncWritesTheStatusOnce(t *testing.T) {
	for name, dryRun := range map[string]bool{"writes": false, "dry run": true} {
		t.Run(name, func(t *testing.T) {
			all := pauseObject("all", v1alpha1.AllStages)
			f := newWriterFixture(t, "eu", all)
			f.w.DryRun = dryRun
			f.stages = append(f.stages, stage("eu1"), stage("eu2"))
			f.pauses[cache.NewObjectName("shop", "all")] = typedPause(t, all)
			if held := f.sync("all"); held != 0 {
				t.Fatalf("held %v at the first sync", held)
			}
			patches := f.patches("status")
			if dryRun {
				if len(patches) != 0 {
					t.Fatalf("a dry run wrote %v", patches)
				}
				return
			}
			if len(patches) != 1 {
				t.Fatalf("%d status patches, want 1: %v", len(patches), patches)
			}
			if got := fmt.Sprint(patches[0]["metadata"], patches[0]["status"].(map[string]any)["shards"]); got != "map[resourceVersion:1] map[eu:2]" {
				t.Errorf("patch %v: want it conditional on version 1, writing shards {eu: 2}", patches[0])
			}
			written := f.serverPause("all")
			if st := written.Status; !maps.Equal(st.Shards, map[string]int32{"eu": 2}) || st.Stages != 2 || activeCondition(st) != "True/Covering" {
				t.Errorf("status shards %v, stages %d, Active %s", st.Shards, st.Stages, activeCondition(st))
			}
			f.pauses[cache.NewObjectName("shop", "all")] = written
			f.sync("all")
			if n := len(f.patches("status")); n != 1 {
				t.Errorf("%d status patches after the cache showed the write, want 1", n)
			}
		})
	}
}

// Another writer that removes the operator's count each time (one built
// before status.shards): two undos are rewritten at once, the third holds
// the writes for 10 s, with a PauseStatusContested Warning naming the step
// of docs/shards.md that prevents it and the metric. The hold ends in a
// write, the next undo doubles it; a pause gone is forgotten.
func TestUndoneWritesAreHeldAndReported(t *testing.T) {
	all := pauseObject("all", v1alpha1.AllStages)
	f := newWriterFixture(t, "eu", all)
	f.stages = append(f.stages, stage("eu1"))
	key := cache.NewObjectName("shop", "all")
	cached := typedPause(t, all)
	f.pauses[key] = cached
	undo := func() { // the other writer's unconditional write, as the cache shows it
		p := cached.DeepCopy()
		p.ResourceVersion = fmt.Sprint(len(f.patches("status")) + 1)
		p.Status.Shards, p.Status.Stages = nil, 1
		f.pauses[key] = p
		f.clock.Step(time.Second)
	}
	for i := range 3 {
		if held := f.sync("all"); held != 0 {
			t.Fatalf("write %d held for %v", i+1, held)
		}
		undo()
	}
	if n := len(f.patches("status")); n != 3 {
		t.Fatalf("%d writes before the hold, want 3", n)
	}
	if held := f.sync("all"); held != 10*time.Second {
		t.Fatalf("held %v at the third undo, want 10s", held)
	}
	if n := len(f.patches("status")); n != 3 || f.contested() != 1 {
		t.Errorf("held writes: %d writes, contested %v; want 3 and 1", n, f.contested())
	}
	if until := f.w.HeldUntil(key); !until.Equal(f.clock.Now().Add(10 * time.Second)) {
		t.Errorf("held until %v, want 10s from %v", until, f.clock.Now())
	}
	warning := <-f.recorder.Events
	for _, says := range []string{"Warning PauseStatusContested ", `"eu"`, "Run this version unsharded first (docs/shards.md, Moving to shards, step 1)"} {
		if !strings.Contains(warning, says) {
			t.Errorf("the Warning does not say %s: %s", says, warning)
		}
	}
	f.clock.Step(10 * time.Second)
	if held := f.sync("all"); held != 0 || len(f.patches("status")) != 4 {
		t.Errorf("after the hold: held %v, %d writes; want 0 and 4", held, len(f.patches("status")))
	}
	undo()
	if held := f.sync("all"); held != 20*time.Second || f.contested() != 2 {
		t.Errorf("the next undo: held %v, contested %v; want 20s and 2", held, f.contested())
	}
	delete(f.pauses, key)
	f.sync("all")
	if until := f.w.HeldUntil(key); !until.IsZero() {
		t.Errorf("a gone pause is still held until %v", until)
	}
}

// A deleted pause held for resume whose Stage is gone is released by the
// status sync; one that is not held, or whose Stage is cached, is left.
func TestSyncReleasesAHeldPauseOfAGoneStage(t *testing.T) {
	for name, tc := range map[string]struct {
		finalizer, stageCached, released bool
	}{
		"held, Stage gone":   {finalizer: true, released: true},
		"held, Stage cached": {finalizer: true, stageCached: true},
		"not held":           {},
	} {
		t.Run(name, func(t *testing.T) {
			u := pauseObject("x-failed", "x")
			u.SetDeletionTimestamp(&metav1.Time{Time: time.Now()})
			if tc.finalizer {
				u.SetFinalizers([]string{v1alpha1.ResumeFinalizer})
			}
			f := newWriterFixture(t, UnshardedKey, u)
			if tc.stageCached {
				f.stages = append(f.stages, stage("x"))
			}
			f.pauses[cache.NewObjectName("shop", "x-failed")] = typedPause(t, u)
			f.sync("x-failed")
			if released := len(f.patches("")) == 1; released != tc.released {
				t.Errorf("released %v, want %v", released, tc.released)
			}
			if n := len(f.patches("status")); n != 0 {
				t.Errorf("%d status writes to a deleted pause", n)
			}
		})
	}
}
