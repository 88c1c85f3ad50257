// Package metrics defines kargo-latch's Prometheus metrics. Names and labels
// are part of the product's contract (dashboards and alert rules depend on
// them), and everything registers on an injected Registerer.
package metrics

import (
	"runtime"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Namespace prefixes every metric name.
const Namespace = "kargo_latch"

// Recorder holds kargo-latch's metrics.
type Recorder struct {
	StagePaused        *prometheus.GaugeVec
	PausesTotal        *prometheus.CounterVec
	ResumesTotal       *prometheus.CounterVec
	StagePhase         *prometheus.GaugeVec
	FailuresTotal      *prometheus.CounterVec
	ProgressingIgnored *prometheus.CounterVec
	InvalidConfig      *prometheus.CounterVec
	InvalidInput       *prometheus.CounterVec
	FreightVerified    *prometheus.CounterVec
	MarkVerifiedErrors *prometheus.CounterVec
	ReconcileErrors    prometheus.Counter
	ReconcileDuration  prometheus.Histogram
	TimeToLatch        prometheus.Histogram
	BuildInfo          *prometheus.GaugeVec

	mu           sync.Mutex
	pausedReason map[[2]string]string // project/stage → reason of its paused series
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
		StagePaused: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "stage_paused",
			Help: "1 while a StagePause covers the Stage; reason is the first covering pause's.",
		}, []string{LabelProject, LabelStage, LabelReason}),
		PausesTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "pauses_total",
			Help: "Times a Stage became paused, by the reason of the pause that paused it.",
		}, []string{LabelProject, LabelStage, LabelReason}),
		ResumesTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "resumes_total",
			Help: "Times a Stage was resumed: the last StagePause covering it was deleted.",
		}, stageLabels),
		StagePhase: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "stage_phase",
			Help: "Latch phase of each Stage: 1 for the current phase, 0 for the others.",
		}, []string{LabelProject, LabelStage, LabelPhase}),
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
		ReconcileErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "reconcile_errors_total",
			Help: "Stage syncs that failed and were retried or dropped.",
		}),
		ReconcileDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "reconcile_duration_seconds",
			Help:    "Time to sync one Stage.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
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
		pausedReason: map[[2]string]string{},
	}
	reg.MustRegister(r.StagePaused, r.PausesTotal, r.ResumesTotal, r.StagePhase, r.FailuresTotal, r.ProgressingIgnored, r.InvalidConfig, r.InvalidInput,
		r.FreightVerified, r.MarkVerifiedErrors, r.ReconcileErrors, r.ReconcileDuration, r.TimeToLatch, r.BuildInfo)
	r.BuildInfo.WithLabelValues(version, runtime.Version()).Set(1)
	return r
}

// SetPhase makes the phase gauge of one Stage one-hot on phase.
func (r *Recorder) SetPhase(project, stage, phase string, all []string) {
	for _, p := range all {
		v := 0.0
		if p == phase {
			v = 1
		}
		r.StagePhase.WithLabelValues(project, stage, p).Set(v)
	}
}

// ForgetStage removes every series of a deleted Stage.
func (r *Recorder) ForgetStage(project, stage string) {
	r.mu.Lock()
	delete(r.pausedReason, [2]string{project, stage})
	r.mu.Unlock()
	l := prometheus.Labels{LabelProject: project, LabelStage: stage}
	for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{
		r.StagePaused, r.PausesTotal, r.ResumesTotal, r.StagePhase, r.FailuresTotal, r.ProgressingIgnored, r.InvalidConfig, r.InvalidInput,
		r.FreightVerified, r.MarkVerifiedErrors,
	} {
		v.DeletePartialMatch(l)
	}
}

// SetPaused sets the paused gauge of one Stage: 1 with reason while paused,
// no series while not. The series is never removed and re-added while the
// Stage stays paused, so an alert on it cannot flicker.
func (r *Recorder) SetPaused(project, stage, reason string, paused bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	key := [2]string{project, stage}
	prev, had := r.pausedReason[key]
	if had && (!paused || prev != reason) {
		r.StagePaused.DeleteLabelValues(project, stage, prev)
		delete(r.pausedReason, key)
	}
	if paused {
		r.StagePaused.WithLabelValues(project, stage, reason).Set(1)
		r.pausedReason[key] = reason
	}
}
