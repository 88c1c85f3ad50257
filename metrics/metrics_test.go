package metrics

import (
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/client-go/util/workqueue"
)

// contract is the metrics table of the product contract (names, types and
// labels). Dashboards and alert rules depend on it: this test fails when
// the code drifts from it.
var contract = map[string]string{
	"kargo_latch_stage_paused":               "GAUGE project,reason,stage",
	"kargo_latch_stage_phase":                "GAUGE phase,project,stage",
	"kargo_latch_pauses_total":               "COUNTER project,reason,stage",
	"kargo_latch_resumes_total":              "COUNTER project,stage",
	"kargo_latch_failures_total":             "COUNTER project,reason,stage",
	"kargo_latch_progressing_ignored_total":  "COUNTER project,stage",
	"kargo_latch_invalid_config_total":       "COUNTER project,stage",
	"kargo_latch_reconcile_errors_total":     "COUNTER ",
	"kargo_latch_write_conflicts_total":      "COUNTER ",
	"kargo_latch_cache_synced":               "GAUGE ",
	"kargo_latch_time_to_latch_seconds":      "HISTOGRAM ",
	"kargo_latch_reconcile_duration_seconds": "HISTOGRAM ",
	"kargo_latch_build_info":                 "GAUGE goversion,version",
	// Not in the contract's list, but part of kargo-latch's API: the
	// bad-input counter docs/bad-input.md documents.
	"kargo_latch_invalid_input_total": "COUNTER input,project,stage",
	// Issue 11: the pause gate failed open (controller/gatebypass).
	"kargo_latch_gate_bypassed_total": "COUNTER project,stage",
	// Issue 24: an object held the name derived for a failure's pause.
	"kargo_latch_pause_name_taken_total": "COUNTER project,stage",
	// Issue 13: the bound on the Promotion cache (controller/promotioncache).
	"kargo_latch_promotions_cached": "GAUGE ",
	// StagePause status writes held back against a writer that keeps
	// undoing them (controller/pausing/statuswrites.go).
	"kargo_latch_pause_status_contested_total": "COUNTER project",
	// Issue 23: verify-on-latch.
	"kargo_latch_verification_runs_started_total": "COUNTER project,stage",
	"kargo_latch_verification_results_total":      "COUNTER phase,project,stage",
	"kargo_latch_verification_problems_total":     "COUNTER project,reason,stage",
	"kargo_latch_latch_to_verification_seconds":   "HISTOGRAM ",
	// Issue 24: the setting of Kargo's controllers against the installed
	// pause-gate policies, compared at start (controller/gatesetting).
	"kargo_latch_gate_setting_differs":   "GAUGE policy",
	"kargo_latch_gate_setting_unchecked": "GAUGE ",
	// Issue 24 §5: the wait of a Stage that showed new trouble, in the
	// Stage queue's urgent lane (queue/lanes.go).
	"kargo_latch_urgent_queue_wait_seconds": "HISTOGRAM ",
}

func TestMetricsMatchTheContract(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := New(reg, "test")
	// Touch every vector so that it shows up.
	r.ObserveStages([]string{"Idle", "Latched"}, stagesOf(StageState{Project: "p", Stage: "s", Phase: "Latched", Paused: true, Reason: "Manual"}))
	r.PausesTotal.WithLabelValues("p", "s", "Manual").Inc()
	r.ResumesTotal.WithLabelValues("p", "s").Inc()
	r.FailuresTotal.WithLabelValues("p", "s", "Degraded").Inc()
	r.ProgressingIgnored.WithLabelValues("p", "s").Inc()
	r.InvalidConfig.WithLabelValues("p", "s").Inc()
	r.InvalidInput.WithLabelValues("p", "s", "state").Inc()
	r.GateBypassed.WithLabelValues("p", "s").Inc()
	r.PauseNameTaken.WithLabelValues("p", "s").Inc()
	r.SetGateSettingDiffers("kargo-latch-pause-gate", true)
	r.PauseStatusContested.WithLabelValues("p").Inc()
	r.VerificationRunsStarted.WithLabelValues("p", "s").Inc()
	r.VerificationResults.WithLabelValues("p", "s", "Successful").Inc()
	r.VerificationProblems.WithLabelValues("p", "s", "VerificationUnsupported").Inc()
	r.LatchToVerification.Observe(1)
	r.ReconcileErrors.Inc()
	r.TimeToLatch.Observe(1)
	r.ReconcileDuration.Observe(1)
	r.UrgentWait.Observe(1)

	got := map[string]string{}
	for _, mf := range gather(t, reg) {
		got[mf.GetName()] = mf.GetType().String() + " " + labelNames(mf)
	}
	if diff := cmp.Diff(contract, got); diff != "" {
		t.Errorf("metrics differ from the contract (-contract +code):\n%s", diff)
	}
	for name, desc := range got {
		for _, forbidden := range []string{"promotion", "freight"} {
			if strings.Contains(desc, forbidden) {
				t.Errorf("%s has a %s label: cardinality must stay per Stage", name, forbidden)
			}
		}
	}
}

func TestForgetStageRemovesItsSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := New(reg, "test")
	for _, stage := range []string{"gone", "kept"} {
		r.PausesTotal.WithLabelValues("p", stage, "Manual").Inc()
		r.ResumesTotal.WithLabelValues("p", stage).Inc()
		r.FailuresTotal.WithLabelValues("p", stage, "Degraded").Inc()
		r.InvalidInput.WithLabelValues("p", stage, "state").Inc()
	}
	r.ForgetStage("p", "gone")
	kept := 0
	for _, mf := range gather(t, reg) {
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == LabelStage && l.GetValue() == "gone" {
					t.Errorf("%s still has a series for the deleted Stage", mf.GetName())
				}
				if l.GetName() == LabelStage && l.GetValue() == "kept" {
					kept++
				}
			}
		}
	}
	if kept != 4 {
		t.Errorf("%d series left for the Stage that stays, want its 4", kept)
	}
}

func TestWorkqueueMetricsArePrefixed(t *testing.T) {
	reg := prometheus.NewRegistry()
	q := workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "stages", MetricsProvider: NewWorkqueueProvider(reg)})
	q.Add("x")
	item, _ := q.Get()
	q.Done(item)
	q.ShutDown()
	names := map[string]bool{}
	for _, mf := range gather(t, reg) {
		names[mf.GetName()] = true
		if !strings.HasPrefix(mf.GetName(), "kargo_latch_workqueue_") || labelNames(mf) != "name" {
			t.Errorf("workqueue metric %s{%s}, want kargo_latch_workqueue_*{name}", mf.GetName(), labelNames(mf))
		}
	}
	for _, want := range []string{"kargo_latch_workqueue_depth", "kargo_latch_workqueue_adds_total", "kargo_latch_workqueue_work_duration_seconds"} {
		if !names[want] {
			t.Errorf("missing %s", want)
		}
	}
}

func gather(t *testing.T, reg *prometheus.Registry) []*dto.MetricFamily {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

func labelNames(mf *dto.MetricFamily) string {
	if len(mf.GetMetric()) == 0 {
		return ""
	}
	var names []string
	for _, l := range mf.GetMetric()[0].GetLabel() {
		names = append(names, l.GetName())
	}
	sort.Strings(names)
	return strings.Join(names, ",")
}

// promotions_cached is read at each scrape from what the operator observes,
// not set: it follows the caches between two scrapes without a write.
func TestPromotionsCachedIsReadAtScrapeTime(t *testing.T) {
	reg := prometheus.NewRegistry()
	r := New(reg, "test")
	value := func() float64 {
		t.Helper()
		for _, mf := range gather(t, reg) {
			if mf.GetName() == "kargo_latch_promotions_cached" {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatal("kargo_latch_promotions_cached not exported")
		return 0
	}
	if got := value(); got != 0 {
		t.Errorf("before any observation: %v, want 0", got)
	}
	cached := 3
	r.ObservePromotionsCached(func() int { return cached })
	if got := value(); got != 3 {
		t.Errorf("observed 3: %v", got)
	}
	cached = 1
	if got := value(); got != 1 {
		t.Errorf("after the cache shrank to 1: %v", got)
	}
}
