package main

import (
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// The verify-on-latch panels: the AnalysisRuns kargo-latch starts for
// latched cycles that Kargo did not verify, their results, what kept one
// from running, and how long from a latch to a result. They are about the
// configured analysis, apart from the latch (a verdict on health).

// analysisPhases are the results of a run, with the color each shows.
var analysisPhases = []struct{ name, color string }{
	{"Successful", "green"},
	{"Failed", "red"},
	{"Error", "dark-red"},
	{"Inconclusive", "orange"},
	{"Aborted", "text"},
}

func verificationRunsStarted() *timeseries.PanelBuilder {
	return bars("Verify-on-latch: AnalysisRuns started per hour",
		"AnalysisRuns kargo-latch started, in Kargo's shape, for a latched cycle whose Stage has a configured verification that Kargo did not start within the grace (kargo-latch.io/verify-on-latch), by Stage, each hour. Kargo's own verifications are not counted.").
		WithTarget(query("A", perHour("project, stage", inProject("kargo_latch_verification_runs_started_total")), "{{project}}/{{stage}}"))
}

func verificationResults() *timeseries.PanelBuilder {
	p := bars("Verify-on-latch: results per hour, by phase",
		"Results of the AnalysisRuns kargo-latch started, each hour: Successful lets mark-verified mark the Freight; Failed, Error and Inconclusive fail the cycle (VerificationFailed, VerificationError, VerificationInconclusive) and pause it with pause-on-failure; Aborted are runs terminated because the cycle failed or was superseded, or deleted twice.").
		WithTarget(query("A", perHour("phase", inProject("kargo_latch_verification_results_total")), "{{phase}}")).
		Stacking(stacked())
	for _, ph := range analysisPhases {
		p.OverrideByName(ph.name, []dashboard.DynamicConfigValue{{Id: "color", Value: map[string]any{"mode": "fixed", "fixedColor": ph.color}}})
	}
	return p
}

func verificationProblems() *timeseries.PanelBuilder {
	return bars("Verify-on-latch: problems per hour, by reason",
		"What kept verify-on-latch from running a cycle's analysis, each hour, by the Warning's reason: VerificationUnsupported (an argument kargo-latch cannot evaluate as Kargo would, a missing template), VerificationNotPickedUp (no Argo Rollouts analysis controller took the run), VerificationRunDeleted, VerificationForbidden (a missing right). None of them pauses a Stage; the Stage's Events name it.").
		WithTarget(query("A", perHour("reason", inProject("kargo_latch_verification_problems_total")), "{{reason}}")).
		Stacking(stacked())
}

func latchToVerification() *timeseries.PanelBuilder {
	return timeseries.NewPanelBuilder().Title("Verify-on-latch: latch to result, p50 and p99").
		Description("Time from a cycle's latch to the result of the AnalysisRun kargo-latch started for it (the grace Kargo is given, the analysis's own run time, and kargo-latch's pickup), over the results of the hour before each point; all projects: the histogram has no project label. No line: no result in that hour.").
		Datasource(datasource).
		Height(8).Span(12).
		Interval("10m").
		WithTarget(query("A", latchToResultQuantile("0.5"), "p50")).
		WithTarget(query("B", latchToResultQuantile("0.99"), "p99")).
		Unit("s").Min(0)
}

// latchToResultQuantile is the quantile q of the latch-to-result times of
// the results in the hour before each point. The histogram is one series a
// replica, exported from the start, so increase() sees its first result.
func latchToResultQuantile(q string) string {
	return `histogram_quantile(` + q + `, sum by (le) (increase(kargo_latch_latch_to_verification_seconds_bucket[1h])))`
}

// stacked stacks a panel's series, so that a bar shows the hour's total.
func stacked() *common.StackingConfigBuilder {
	return common.NewStackingConfigBuilder().Mode(common.StackingModeNormal)
}
