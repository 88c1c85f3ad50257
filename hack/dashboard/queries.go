package main

import (
	"fmt"
	"strings"
)

// The PromQL of the panels. Every selector filters on the dashboard's
// project variable but for the operator-wide families, which have no
// project label.

// inProject selects a per-Stage family in the chosen projects; extra adds
// matchers.
func inProject(family string, extra ...string) string {
	return family + "{" + strings.Join(append([]string{`project=~"$project"`}, extra...), ", ") + "}"
}

// countedOver is how many times a counter selected by sel went up in the
// window before each point. A kargo-latch counter is born at 1: a Stage's
// series appears at its first pause, failure or bypass, and increase()
// cannot see the step from nothing to 1. A series younger than the window
// (absent a window ago) counts its whole value instead; the alert rule
// KargoLatchGateBypassed does the same.
func countedOver(window, sel string) string {
	return fmt.Sprintf("(%[2]s unless %[2]s offset %[1]s) or increase(%[2]s[%[1]s])", window, sel)
}

// perHour sums countedOver an hour by the labels given.
func perHour(by, sel string) string {
	if by == "" {
		return "sum(" + countedOver("1h", sel) + ")"
	}
	return "sum by (" + by + ") (" + countedOver("1h", sel) + ")"
}

// pausedStages is one series per paused Stage of the chosen projects, with
// the pause's reason. max drops the scraping replica's labels: the leader and
// the standbys export the same per-Stage gauges.
var pausedStages = `max by (project, stage, reason) (` + inProject("kargo_latch_stage_paused") + `)`

// pausedSince is, for each Stage paused now, when its pause began, in
// milliseconds for Grafana's time units: the minute after the last one in
// the dashboard's time range at which the Stage was known (it had a record)
// and not paused; the range's start when it was paused all along. The
// per-Stage gauges exist only as long as the pause, so there is no start
// time to read but this one.
var pausedSince = `1000 * (
  max by (project, stage) (
      max_over_time(timestamp(
        max by (project, stage) (` + inProject("kargo_latch_stage_phase", `phase="Idle"`) + `)
        unless on (project, stage) kargo_latch_stage_paused
      )[$__range:1m]) + 60
    or
      min_over_time(timestamp(
        max by (project, stage) (` + inProject("kargo_latch_stage_paused") + `)
      )[$__range:1m])
  )
  and on (project, stage) ` + inProject("kargo_latch_stage_paused") + `
)`

// phaseCode is each Stage's latch phase as a number, the position of the
// phase in phases from 1, for the state timeline to map back to names. The
// phase gauge is one-hot, so the sum is the current phase's code.
func phaseCode(phases []string) string {
	terms := make([]string, len(phases))
	for i, p := range phases {
		terms[i] = fmt.Sprintf("%d * max by (project, stage) (%s)", i+1, inProject("kargo_latch_stage_phase", fmt.Sprintf("phase=%q", p)))
	}
	return strings.Join(terms, "\n+ ")
}
