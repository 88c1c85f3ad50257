// Package metrics defines kargo-latch's Prometheus metrics. Names and labels
// are part of the product's contract (dashboards and alert rules depend on
// them), and everything registers on an injected Registerer.
package metrics

import (
	"runtime"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// Namespace prefixes every metric name.
const Namespace = "kargo_latch"

// Recorder holds kargo-latch's metrics.
type Recorder struct {
	PausesTotal        *prometheus.CounterVec
	ResumesTotal       *prometheus.CounterVec
	FailuresTotal      *prometheus.CounterVec
	ProgressingIgnored *prometheus.CounterVec
	InvalidConfig      *prometheus.CounterVec
	InvalidInput       *prometheus.CounterVec
	FreightVerified    *prometheus.CounterVec
	MarkVerifiedErrors *prometheus.CounterVec
	GateBypassed       *prometheus.CounterVec
	PauseNameTaken     *prometheus.CounterVec
	ReconcileErrors    prometheus.Counter
	WriteConflicts     prometheus.Counter
	CacheSynced        prometheus.Gauge
	ReconcileDuration  prometheus.Histogram
	// UrgentWait is how long a Stage whose update showed a new failure, or
	// whose time-based transition fell due, waited in the urgent lane of
	// the Stage queue for a worker.
	UrgentWait  prometheus.Histogram
	TimeToLatch prometheus.Histogram
	BuildInfo   *prometheus.GaugeVec

	// Verify-on-latch: the AnalysisRuns kargo-latch started, their
	// results by phase, what kept one from running (by reason), and the
	// time from a latch to its run's result.
	VerificationRunsStarted *prometheus.CounterVec
	VerificationResults     *prometheus.CounterVec
	VerificationProblems    *prometheus.CounterVec
	LatchToVerification     prometheus.Histogram
	// VerifyOnLatchAvailable is, per project with a Stage that opts into
	// verify-on-latch, 1 while the operator can watch its AnalysisRuns
	// there, else 0: verify-on-latch is then off in that project.
	VerifyOnLatchAvailable *prometheus.GaugeVec

	// GateSettingDiffers is 1 for each installed pause-gate policy that
	// names Kargo's controllers otherwise than the operator was told at
	// start (else 0); GateSettingUnchecked is 1 when the policies could
	// not be read to compare (controller/gatesetting).
	GateSettingDiffers   *prometheus.GaugeVec
	GateSettingUnchecked prometheus.Gauge

	// PauseStatusContested counts, by project, the holds of StagePause
	// status writes when another writer kept undoing this operator's count.
	PauseStatusContested *prometheus.CounterVec

	// stages exports stage_paused and stage_phase (see ObserveStages).
	stages *stageGauges
	// promotionsCached counts the cached Promotions for promotions_cached
	// at scrape time (see ObservePromotionsCached); nil until then.
	promotionsCached atomic.Pointer[func() int]
}

// Label names.
const (
	LabelProject = "project"
	LabelStage   = "stage"
	LabelPhase   = "phase"
	LabelReason  = "reason"
	LabelInput   = "input"
)

var stageLabels = []string{LabelProject, LabelStage}

// New creates the metrics and registers them on reg.
func New(reg prometheus.Registerer, version string) *Recorder {
	r := &Recorder{
		PausesTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "pauses_total",
			Help: "Times a Stage became paused, by the reason of the pause that paused it.",
		}, []string{LabelProject, LabelStage, LabelReason}),
		ResumesTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "resumes_total",
			Help: "Times a Stage was resumed: the last StagePause covering it was deleted.",
		}, stageLabels),
		FailuresTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "failures_total",
			Help: "Latch cycles that failed, by reason.",
		}, []string{LabelProject, LabelStage, LabelReason}),
		ProgressingIgnored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "progressing_ignored_total",
			Help: "Turns to Progressing of a latched Stage that the latch ignored.",
		}, stageLabels),
		InvalidConfig: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "invalid_config_total",
			Help: "Invalid kargo-latch.io/ setting annotations found (each new bad value once).",
		}, stageLabels),
		InvalidInput: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "invalid_input_total",
			Help: "Unusable input found on a Stage, by kind: state (a garbage record), health (an unknown health string), status (no status), apps (more Applications than the per-App latch handles).",
		}, []string{LabelProject, LabelStage, LabelInput}),
		FreightVerified: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "freight_verified_total",
			Help: "Freight that kargo-latch marked verified in the Stage after a latch (mark-verified).",
		}, stageLabels),
		MarkVerifiedErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "mark_verified_errors_total",
			Help: "Tries to mark Freight verified that were refused: the operator lacks the mark-verified rights.",
		}, stageLabels),
		GateBypassed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "gate_bypassed_total",
			Help: "Auto-promotions created while a StagePause covered their Stage: the pause gate did not stop them (counted once per Promotion, by the replica that made its GateBypassed Event).",
		}, stageLabels),
		PauseNameTaken: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "pause_name_taken_total",
			Help: "Objects found at the name derived for a failure's StagePause that were not that pause (counted once per object): the pause was made under another name.",
		}, stageLabels),
		ReconcileErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "reconcile_errors_total",
			Help: "Syncs that failed and were retried or dropped; write conflicts are not counted here.",
		}),
		WriteConflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "write_conflicts_total",
			Help: "Syncs retried because a resourceVersion-guarded write conflicted with another writer (Kargo's status writes, by design); not errors.",
		}),
		CacheSynced: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "cache_synced",
			Help: "1 once every informer cache has synced; 0 while one cannot list (a missing CRD or RBAC right: see the log and /readyz).",
		}),
		ReconcileDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "reconcile_duration_seconds",
			Help:    "Time to sync one Stage.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}),
		UrgentWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "urgent_queue_wait_seconds",
			Help:    "Time a Stage whose update showed a new failure (a failed or errored promotion or verification), or whose time-based transition fell due, waited for a worker: the first step of a failure's reaction.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
		TimeToLatch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "time_to_latch_seconds",
			Help:    "Time from a promotion's finish to the Stage's first Healthy.",
			Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600},
		}),
		BuildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "build_info",
			Help: "Always 1; labels tell the version and the Go version kargo-latch was built with.",
		}, []string{"version", "goversion"}),
		VerificationRunsStarted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "verification_runs_started_total",
			Help: "AnalysisRuns kargo-latch started for a latched cycle that Kargo had not verified (verify-on-latch).",
		}, stageLabels),
		VerificationResults: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "verification_results_total",
			Help: "Results of the AnalysisRuns kargo-latch started, by phase: Successful, Failed, Error, Inconclusive, Aborted.",
		}, []string{LabelProject, LabelStage, LabelPhase}),
		VerificationProblems: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "verification_problems_total",
			Help: "What kept verify-on-latch from running an analysis, by reason: VerificationUnsupported, VerificationNotPickedUp, VerificationRunDeleted, VerificationForbidden, VerificationUnavailable.",
		}, []string{LabelProject, LabelStage, LabelReason}),
		LatchToVerification: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "latch_to_verification_seconds",
			Help:    "Time from a latch to the result of the AnalysisRun kargo-latch started for it.",
			Buckets: []float64{5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600},
		}),
		VerifyOnLatchAvailable: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "verify_on_latch_available",
			Help: "Per project with a Stage that opts into verify-on-latch (and has spec.verification): 1 while the operator can watch its AnalysisRuns there, 0 while it cannot (Argo Rollouts' CRDs missing, no rights in the project), when verify-on-latch is off there and the latch and the pauses carry on without it.",
		}, []string{LabelProject}),
		GateSettingDiffers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "gate_setting_differs",
			Help: "1 for an installed pause-gate policy whose setting of Kargo's controllers (usernames, regex) differs from the operator's --kargo-controllers and --kargo-controller-regex, 0 where they agree; read at start.",
		}, []string{"policy"}),
		GateSettingUnchecked: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "gate_setting_unchecked",
			Help: "1 when the operator could not read the installed pause-gate policies at start to compare its setting of Kargo's controllers with theirs.",
		}),
		stages: newStageGauges(),
		PauseStatusContested: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "pause_status_contested_total",
			Help: "Times this operator held its writes of a StagePause's status back because another writer kept removing or changing its count in status.shards (most likely a kargo-latch built before shards, beside this one: run this version unsharded first).",
		}, []string{LabelProject}),
	}
	promotionsCached := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: Namespace, Name: "promotions_cached",
		Help: "Promotions held in the operator's caches: the unfinished ones (Pending or Running) of the Stages it serves. Finished Promotions are never kept.",
	}, func() float64 {
		if count := r.promotionsCached.Load(); count != nil {
			return float64((*count)())
		}
		return 0
	})
	reg.MustRegister(r.stages, promotionsCached, r.PausesTotal, r.ResumesTotal, r.FailuresTotal, r.ProgressingIgnored, r.InvalidConfig, r.InvalidInput,
		r.FreightVerified, r.MarkVerifiedErrors, r.GateBypassed, r.PauseNameTaken, r.ReconcileErrors, r.WriteConflicts, r.CacheSynced, r.ReconcileDuration, r.UrgentWait, r.TimeToLatch, r.BuildInfo)
	reg.MustRegister(r.GateSettingDiffers, r.GateSettingUnchecked, r.PauseStatusContested, r.VerificationRunsStarted, r.VerificationResults, r.VerificationProblems, r.LatchToVerification)
	reg.MustRegister(r.VerifyOnLatchAvailable)
	r.BuildInfo.WithLabelValues(version, runtime.Version()).Set(1)
	return r
}

// ObservePromotionsCached makes kargo_latch_promotions_cached report count,
// called at each scrape. Until then it reports 0; a second call replaces
// the first.
func (r *Recorder) ObservePromotionsCached(count func() int) {
	r.promotionsCached.Store(&count)
}

// ForgetStage removes the counters of a deleted Stage. Its gauges go by
// themselves: they are read from the caches, which no longer hold it.
func (r *Recorder) ForgetStage(project, stage string) {
	l := prometheus.Labels{LabelProject: project, LabelStage: stage}
	for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{
		r.PausesTotal, r.ResumesTotal, r.FailuresTotal, r.ProgressingIgnored, r.InvalidConfig, r.InvalidInput,
		r.FreightVerified, r.MarkVerifiedErrors, r.GateBypassed, r.PauseNameTaken,
		r.VerificationRunsStarted, r.VerificationResults, r.VerificationProblems,
	} {
		v.DeletePartialMatch(l)
	}
}

// SetGateSettingDiffers records the start-time comparison of one policy.
func (r *Recorder) SetGateSettingDiffers(policy string, differs bool) {
	r.GateSettingDiffers.WithLabelValues(policy).Set(boolValue(differs))
}

// SetGateSettingUnchecked records whether the comparison could be made.
func (r *Recorder) SetGateSettingUnchecked(unchecked bool) {
	r.GateSettingUnchecked.Set(boolValue(unchecked))
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
