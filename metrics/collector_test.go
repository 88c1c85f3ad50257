package metrics

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
)

// stagesOf is a fixed walk.
func stagesOf(states ...StageState) func(func(StageState) bool) {
	return func(yield func(StageState) bool) {
		for _, s := range states {
			if !yield(s) {
				return
			}
		}
	}
}

var testPhases = []string{"Idle", "Promoted", "Latched", "Degraded", "Failed"}

// stageSeries lists the per-Stage gauges' series as "name{labels} value".
func stageSeries(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	var out []string
	for _, mf := range gather(t, reg) {
		if mf.GetName() != "kargo_latch_stage_paused" && mf.GetName() != "kargo_latch_stage_phase" {
			continue
		}
		for _, m := range mf.GetMetric() {
			s := mf.GetName() + "{"
			for i, l := range m.GetLabel() {
				if i > 0 {
					s += ","
				}
				s += l.GetName() + "=" + l.GetValue()
			}
			out = append(out, s+"} "+map[bool]string{true: "1", false: "0"}[m.GetGauge().GetValue() == 1])
		}
	}
	slices.Sort(out)
	return out
}

// The gauges tell what the walk says at each scrape and keep nothing
// between scrapes: a Stage resumed since the last scrape has no paused
// series, whoever resumed it.
func TestStageGaugesTellEachScrapesWalk(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := New(reg, "test")
	if got := stageSeries(t, reg); len(got) != 0 {
		t.Fatalf("series before any walk is observed: %v", got)
	}
	now := []StageState{
		{Project: "p", Stage: "prod", Phase: "Latched", Paused: true, Reason: "Manual"},
		{Project: "p", Stage: "qa", Phase: "Idle"},
		{Project: "p", Stage: "new"}, // no usable record: no series
	}
	r.ObserveStages(testPhases, func(yield func(StageState) bool) {
		for _, s := range now {
			if !yield(s) {
				return
			}
		}
	})
	want := []string{
		"kargo_latch_stage_paused{project=p,reason=Manual,stage=prod} 1",
		"kargo_latch_stage_phase{phase=Degraded,project=p,stage=prod} 0",
		"kargo_latch_stage_phase{phase=Degraded,project=p,stage=qa} 0",
		"kargo_latch_stage_phase{phase=Failed,project=p,stage=prod} 0",
		"kargo_latch_stage_phase{phase=Failed,project=p,stage=qa} 0",
		"kargo_latch_stage_phase{phase=Idle,project=p,stage=prod} 0",
		"kargo_latch_stage_phase{phase=Idle,project=p,stage=qa} 1",
		"kargo_latch_stage_phase{phase=Latched,project=p,stage=prod} 1",
		"kargo_latch_stage_phase{phase=Latched,project=p,stage=qa} 0",
		"kargo_latch_stage_phase{phase=Promoted,project=p,stage=prod} 0",
		"kargo_latch_stage_phase{phase=Promoted,project=p,stage=qa} 0",
	}
	if diff := cmp.Diff(want, stageSeries(t, reg)); diff != "" {
		t.Fatalf("first scrape (-want +got):\n%s", diff)
	}

	// Resumed, and qa deleted: the next scrape says so, nothing stays.
	now = []StageState{{Project: "p", Stage: "prod", Phase: "Latched"}}
	want = []string{
		"kargo_latch_stage_phase{phase=Degraded,project=p,stage=prod} 0",
		"kargo_latch_stage_phase{phase=Failed,project=p,stage=prod} 0",
		"kargo_latch_stage_phase{phase=Idle,project=p,stage=prod} 0",
		"kargo_latch_stage_phase{phase=Latched,project=p,stage=prod} 1",
		"kargo_latch_stage_phase{phase=Promoted,project=p,stage=prod} 0",
	}
	if diff := cmp.Diff(want, stageSeries(t, reg)); diff != "" {
		t.Errorf("after the resume (-want +got):\n%s", diff)
	}

	// A new reason replaces the series: one per paused Stage.
	now = []StageState{{Project: "p", Stage: "prod", Phase: "Failed", Paused: true, Reason: "Degraded"}}
	paused := 0
	for _, s := range stageSeries(t, reg) {
		if s[:len("kargo_latch_stage_paused")] == "kargo_latch_stage_paused" {
			paused++
			if s != "kargo_latch_stage_paused{project=p,reason=Degraded,stage=prod} 1" {
				t.Errorf("paused series %s, want reason Degraded", s)
			}
		}
	}
	if paused != 1 {
		t.Errorf("%d paused series, want 1", paused)
	}
}
