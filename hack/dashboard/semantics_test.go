package main

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/promqltest"
)

// inTest fills in the Grafana variables for a test: all projects, a
// dashboard range of an hour.
var inTest = strings.NewReplacer(`"$project"`, `".*"`, "$__range", "1h")

// evaluate runs a promqltest script whose eval lines are filled in with the
// panels' expressions, each on one line as the script wants it.
func evaluate(t *testing.T, script string, exprs ...string) {
	t.Helper()
	args := make([]any, len(exprs))
	for i, e := range exprs {
		args[i] = oneLine(inTest.Replace(e))
	}
	promqltest.RunTest(t, fmt.Sprintf(script, args...), promqltest.NewTestEngine(t, false, 0, promqltest.DefaultMaxSamplesPerQuery))
}

// TestPausedSince: a pause's start is the minute after the Stage was last
// seen not paused in the range, or the range's start; resumed Stages have
// no row. Stages a (paused at 30m), b (all along), c (resumed at 21m) and
// d (paused at 10m, resumed at 21m, paused again at 40m), evaluated at 60m
// over an hour. Every Stage has its phase series all along; the paused
// gauge has a series only while paused, as the operator exports it.
func TestPausedSince(t *testing.T) {
	evaluate(t, `
load 1m
  kargo_latch_stage_phase{project="p", stage="a", phase="Idle", instance="r1"} 0x60
  kargo_latch_stage_phase{project="p", stage="b", phase="Idle", instance="r1"} 0x60
  kargo_latch_stage_phase{project="p", stage="c", phase="Idle", instance="r1"} 0x60
  kargo_latch_stage_phase{project="p", stage="d", phase="Idle", instance="r1"} 0x60
  kargo_latch_stage_paused{project="p", stage="a", reason="Manual", instance="r1"} _x30 1x30
  kargo_latch_stage_paused{project="p", stage="b", reason="Manual", instance="r1"} 1x60
  kargo_latch_stage_paused{project="p", stage="c", reason="Manual", instance="r1"} _x10 1x10 stale
  kargo_latch_stage_paused{project="p", stage="d", reason="Degraded", instance="r1"} _x10 1x10 stale _x18 1x20

eval instant at 60m %s
  {project="p", stage="a"} 1800000
  {project="p", stage="b"} 60000
  {project="p", stage="d"} 2400000

eval instant at 60m %s
  {project="p", stage="a", reason="Manual"} 1
  {project="p", stage="b", reason="Manual"} 1
  {project="p", stage="d", reason="Degraded"} 1
`, pausedSince, pausedStages)
}

// TestPerHourCountsBornCounters: a counter born in the window counts from
// nothing (new, born at 1 at 30m, 3 from 50m), an older one counts its
// increase (old, +1 a minute).
func TestPerHourCountsBornCounters(t *testing.T) {
	evaluate(t, `
load 1m
  kargo_latch_pauses_total{project="p", stage="new", reason="Manual"} _x30 1x19 3x10
  kargo_latch_pauses_total{project="p", stage="old", reason="Manual"} 0+1x60

eval instant at 60m %s
  {reason="Manual"} 63
`, perHour("reason", inProject("kargo_latch_pauses_total")))
}

// TestPhaseCode: each Stage's phase becomes its position in phases, from 1.
func TestPhaseCode(t *testing.T) {
	evaluate(t, `
load 1m
  kargo_latch_stage_phase{project="p", stage="a", phase="Idle"} 0
  kargo_latch_stage_phase{project="p", stage="a", phase="Promoted"} 0
  kargo_latch_stage_phase{project="p", stage="a", phase="Latched"} 1
  kargo_latch_stage_phase{project="p", stage="a", phase="Degraded"} 0
  kargo_latch_stage_phase{project="p", stage="a", phase="Failed"} 0

eval instant at 0m %s
  {project="p", stage="a"} 3
`, phaseCode([]string{"Idle", "Promoted", "Latched", "Degraded", "Failed"}))
}
