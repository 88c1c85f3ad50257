package main

import (
	"strconv"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/heatmap"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/statetimeline"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// The panels, in the order of layout. Widths add up to 24 a row.

func pausedCount() *stat.PanelBuilder {
	return count("Paused Stages",
		"Stages of the chosen projects a StagePause holds now: Kargo does not auto-promote to them.",
		`count(`+pausedStages+`) or vector(0)`, step(1, "orange"))
}

func troubledCount() *stat.PanelBuilder {
	return count("Degraded or Failed Stages",
		"Stages whose latch phase is Degraded (unhealthy after a healthy promotion) or Failed (a failure paused them).",
		`count(max by (project, stage) (`+inProject("kargo_latch_stage_phase", `phase=~"Degraded|Failed"`)+`) == 1) or vector(0)`,
		step(1, "red"))
}

func bypassCount() *stat.PanelBuilder {
	return count("Gate bypasses (24h)",
		"Auto-promotions that passed the pause gate while a StagePause covered their Stage, in the last 24 hours. Any is an incident: the gate fails open (see the runbook of KargoLatchGateBypassed).",
		`sum(`+countedOver("24h", inProject("kargo_latch_gate_bypassed_total"))+`) or vector(0)`,
		step(1, "red"))
}

// count is a number that turns color from the threshold step on.
func count(title, description, expr string, from dashboard.Threshold) *stat.PanelBuilder {
	return stat.NewPanelBuilder().Title(title).Description(description).Datasource(datasource).
		Height(4).Span(6).
		WithTarget(instant("A", expr, "")).
		Thresholds(thresholds(from)).
		ColorMode(common.BigValueColorModeBackground).
		GraphMode(common.BigValueGraphModeNone).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}))
}

func cacheSynced() *stat.PanelBuilder {
	return stat.NewPanelBuilder().Title("Caches synced").
		Description("Per operator replica: synced once every informer cache has listed; a replica that cannot list (a missing CRD or RBAC right) stays not synced and is not ready (see its log and /readyz).").
		Datasource(datasource).
		Height(4).Span(6).
		WithTarget(instant("A", `min by (instance) (kargo_latch_cache_synced)`, "{{instance}}")).
		Mappings([]dashboard.ValueMapping{valueText(
			shown{"1", "synced", "green"},
			shown{"0", "not synced", "red"},
		)}).
		NoValue("no replica scraped").
		ColorMode(common.BigValueColorModeBackground).
		GraphMode(common.BigValueGraphModeNone).
		TextMode(common.BigValueTextModeValueAndName).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}))
}

func pausedTable() *table.PanelBuilder {
	return table.NewPanelBuilder().Title("Paused Stages now").
		Description("Each Stage a StagePause holds now, the reason of the first covering pause, and since when it is paused (within the dashboard's time range: a Stage paused since before it shows the range's start).").
		Datasource(datasource).
		Height(9).Span(10).
		WithTarget(tableQuery("A", pausedStages)).
		WithTarget(tableQuery("B", pausedSince)).
		// One row a Stage: the two queries joined on project and stage,
		// A's value (always 1) dropped, B's shown as a time.
		WithTransformation(dashboard.DataTransformerConfig{Id: "merge", Options: map[string]any{}}).
		WithTransformation(dashboard.DataTransformerConfig{Id: "organize", Options: map[string]any{
			"excludeByName": map[string]bool{"Time": true, "Value #A": true},
			"indexByName":   map[string]int{"project": 0, "stage": 1, "reason": 2, "Value #B": 3},
			"renameByName":  map[string]string{"project": "Project", "stage": "Stage", "reason": "Reason", "Value #B": "Paused since"},
		}}).
		Unit("dateTimeFromNow").
		NoValue("no Stage is paused").
		Footer(common.NewTableFooterOptionsBuilder().Show(false).Reducer([]string{"sum"})).
		SortBy([]cog.Builder[common.TableSortByFieldState]{
			common.NewTableSortByFieldStateBuilder().DisplayName("Paused since"),
		})
}

func pausedTimeline() *statetimeline.PanelBuilder {
	return statetimeline.NewPanelBuilder().Title("Paused Stages over time").
		Description("A bar while a StagePause held the Stage, one row a Stage and reason.").
		Datasource(datasource).
		Height(9).Span(14).
		WithTarget(query("A", pausedStages, "{{project}}/{{stage}}: {{reason}}")).
		Mappings([]dashboard.ValueMapping{valueText(shown{"1", "paused", "orange"})}).
		ShowValue(common.VisibilityModeNever).
		Legend(common.NewVizLegendOptionsBuilder().ShowLegend(false))
}

func phaseTimeline() *statetimeline.PanelBuilder {
	names := make([]string, len(phases))
	codes := make([]shown, len(phases))
	for i, p := range phases {
		names[i] = p.name
		codes[i] = shown{strconv.Itoa(i + 1), p.name, p.color}
	}
	return statetimeline.NewPanelBuilder().Title("Latch phase per Stage").
		Description("Each Stage's latch phase over time: Idle, Promoted (waiting for the first Healthy), Latched, Degraded (unhealthy after being healthy), Failed. Stages kargo-latch has not judged yet have no row.").
		Datasource(datasource).
		Height(10).Span(24).
		WithTarget(query("A", phaseCode(names), "{{project}}/{{stage}}")).
		Mappings([]dashboard.ValueMapping{valueText(codes...)}).
		ShowValue(common.VisibilityModeAuto).
		MergeValues(true)
}

func pausesAndResumes() *timeseries.PanelBuilder {
	return bars("Pauses and resumes per hour",
		"Stages that became paused, by the pause's reason, and Stages resumed (their last pause deleted), in each hour.").
		WithTarget(query("A", perHour("reason", inProject("kargo_latch_pauses_total")), "paused: {{reason}}")).
		WithTarget(query("B", perHour("", inProject("kargo_latch_resumes_total")), "resumed"))
}

func failuresByReason() *timeseries.PanelBuilder {
	return bars("Failures per hour, by reason",
		"Latch cycles that failed in each hour, by reason (PromotionFailed, VerificationFailed, Degraded, LatchDeadlineExceeded, ...). Each failure pauses its Stage.").
		WithTarget(query("A", perHour("reason", inProject("kargo_latch_failures_total")), "{{reason}}")).
		Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal))
}

func timeToLatch() *heatmap.PanelBuilder {
	return heatmap.NewPanelBuilder().Title("Time to latch").
		Description("Time from a promotion's finish to its Stage's first Healthy, of the latches in each interval (all projects: the histogram has no project label).").
		Datasource(datasource).
		Height(8).Span(12).
		Interval("10m").
		WithTarget(query("A", `sum by (le) (increase(kargo_latch_time_to_latch_seconds_bucket[$__rate_interval]))`, "{{le}}").
			Format(prometheus.PromQueryFormatHeatmap)).
		Calculate(false).
		YAxis(heatmap.NewYAxisConfigBuilder().Unit("s")).
		Color(heatmap.NewHeatmapColorOptionsBuilder().Mode(heatmap.HeatmapColorModeScheme).Scheme("Oranges").
			Scale(heatmap.HeatmapColorScaleExponential).Exponent(0.5).Steps(64)).
		CellValues(heatmap.NewCellValuesBuilder().Unit("short"))
}

func freightVerified() *timeseries.PanelBuilder {
	return bars("Freight marked verified per hour",
		"Freight kargo-latch marked verified in a Stage after a latch (the mark-verified component), each hour.").
		WithTarget(query("A", perHour("project, stage", inProject("kargo_latch_freight_verified_total")), "{{project}}/{{stage}}"))
}

func gateBypasses() *timeseries.PanelBuilder {
	return bars("Gate bypasses per hour",
		"Auto-promotions that passed the pause gate while a StagePause covered their Stage. Any is an incident.").
		Span(8).
		WithTarget(query("A", perHour("project, stage", inProject("kargo_latch_gate_bypassed_total")), "{{project}}/{{stage}}")).
		ColorScheme(dashboard.NewFieldColorBuilder().Mode(dashboard.FieldColorModeIdFixed).FixedColor("red"))
}

func reconcileErrors() *timeseries.PanelBuilder {
	return timeseries.NewPanelBuilder().Title("Reconcile errors").
		Description("Stage syncs that failed, per second, by replica; write conflicts with Kargo are retries, not errors, and are not counted. The error log has each one's key.").
		Datasource(datasource).
		Height(8).Span(8).
		WithTarget(query("A", `sum by (instance) (rate(kargo_latch_reconcile_errors_total[$__rate_interval]))`, "{{instance}}")).
		Unit("short").AxisLabel("errors/s").Min(0)
}

func workqueueDepth() *timeseries.PanelBuilder {
	return timeseries.NewPanelBuilder().Title("Workqueue depth").
		Description("Items waiting in each work queue (stages, stagepauses), by replica. A depth that keeps growing means the operator falls behind.").
		Datasource(datasource).
		Height(8).Span(8).
		WithTarget(query("A", `max by (instance, name) (kargo_latch_workqueue_depth)`, "{{name}} ({{instance}})")).
		Unit("short").Min(0)
}

// bars is a timeseries of hourly counts, a bar an hour.
func bars(title, description string) *timeseries.PanelBuilder {
	return timeseries.NewPanelBuilder().Title(title).Description(description).
		Datasource(datasource).
		Height(8).Span(12).
		Interval("1h").
		DrawStyle(common.GraphDrawStyleBars).
		FillOpacity(80).
		Unit("short").Decimals(0).Min(0)
}
