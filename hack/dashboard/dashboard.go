package main

import (
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
)

// uid is the dashboard's identity in Grafana: an import or a ConfigMap
// with the same uid replaces the dashboard instead of adding a copy.
const uid = "kargo-latch"

// phases are the latch phases in cycle order (latch.Phases, which the test
// checks), with the color each shows in the state timeline.
var phases = []struct{ name, color string }{
	{"Idle", "text"},
	{"Promoted", "blue"},
	{"Latched", "green"},
	{"Degraded", "orange"},
	{"Failed", "red"},
}

// Dashboard is Grafana's classic dashboard model: the JSON that Import and
// the dashboard sidecar read. The SDK marks it deprecated in favour of the
// v2 schema of Grafana 12's dashboard API, which neither reads.
type Dashboard = dashboard.Dashboard //nolint:staticcheck // see above

// datasource points every panel and query at the datasource variable.
var datasource = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

func build() (Dashboard, error) {
	//nolint:staticcheck // the classic model: see Dashboard
	b := dashboard.NewDashboardBuilder("kargo-latch").
		Uid(uid).
		Description("Which Kargo Stages kargo-latch holds paused and why, their latch phases, the analyses verify-on-latch runs, and the operator's health.").
		Tags([]string{"kargo", "kargo-latch"}).
		Time("now-6h", "now").
		Refresh("30s").
		Timezone(common.TimeZoneBrowser).
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		WithVariable(dashboard.NewDatasourceVariableBuilder("datasource").
			Label("Data source").
			Type("prometheus")).
		WithVariable(dashboard.NewQueryVariableBuilder("project").
			Label("Project").
			Datasource(datasource).
			Query(dashboard.StringOrMap{String: cog.ToPtr("label_values(kargo_latch_stage_phase, project)")}).
			Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
			Sort(dashboard.VariableSortAlphabeticalAsc).
			Multi(true).
			IncludeAll(true).
			AllValue(".*").
			Current(dashboard.VariableOption{
				Text:  dashboard.StringOrArrayOfString{String: cog.ToPtr("All")},
				Value: dashboard.StringOrArrayOfString{String: cog.ToPtr("$__all")},
			}))
	for _, row := range layout() {
		for _, p := range row {
			b.WithPanel(p)
		}
	}
	return b.Build()
}

// layout is the dashboard from top to bottom, a row of panels at a time:
// first what holds Stages now, then the Stages over time, then
// verify-on-latch's analyses, then the operator's own health.
func layout() [][]cog.Builder[dashboard.Panel] {
	return [][]cog.Builder[dashboard.Panel]{
		{pausedCount(), troubledCount(), bypassCount(), cacheSynced()},
		{pausedTable(), pausedTimeline()},
		{phaseTimeline()},
		{pausesAndResumes(), failuresByReason()},
		{timeToLatch(), freightVerified()},
		{verificationRunsStarted(), verificationResults()},
		{verificationProblems(), latchToVerification()},
		{gateBypasses(), reconcileErrors(), workqueueDepth()},
	}
}

// query is a range query of expr; legend names its series.
func query(refID, expr, legend string) *prometheus.DataqueryBuilder {
	q := prometheus.NewDataqueryBuilder().RefId(refID).Datasource(datasource).Expr(expr).Range()
	if legend != "" {
		q.LegendFormat(legend)
	}
	return q
}

// instant is an instant query of expr, for a panel that shows one value a
// series.
func instant(refID, expr, legend string) *prometheus.DataqueryBuilder {
	q := prometheus.NewDataqueryBuilder().RefId(refID).Datasource(datasource).Expr(expr).Instant()
	if legend != "" {
		q.LegendFormat(legend)
	}
	return q
}

// tableQuery is an instant query of expr shown as a table, one row a series.
func tableQuery(refID, expr string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().RefId(refID).Datasource(datasource).Expr(expr).
		Instant().Format(prometheus.PromQueryFormatTable)
}

// thresholds colors a value green below each step's value and the step's
// color from it on.
func thresholds(steps ...dashboard.Threshold) *dashboard.ThresholdsConfigBuilder {
	return dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).
		Steps(append([]dashboard.Threshold{{Color: "green"}}, steps...))
}

func step(from float64, color string) dashboard.Threshold {
	return dashboard.Threshold{Value: &from, Color: color}
}

// shown is how a value mapping shows one value.
type shown struct{ value, text, color string }

// valueText shows each value as its text in its color, listed in order.
func valueText(values ...shown) dashboard.ValueMapping {
	options := map[string]dashboard.ValueMappingResult{}
	for i, v := range values {
		options[v.value] = dashboard.ValueMappingResult{Text: cog.ToPtr(v.text), Color: cog.ToPtr(v.color), Index: cog.ToPtr(int32(i))}
	}
	return dashboard.ValueMapping{ValueMap: &dashboard.ValueMap{Type: dashboard.MappingTypeValueToText, Options: options}}
}
