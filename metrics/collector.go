package metrics

import (
	"iter"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// StageState is what the per-Stage gauges say of one Stage.
type StageState struct {
	Project, Stage string
	// Phase is the latch phase of the Stage's stored record; empty when the
	// Stage has no usable record, which exports no phase series.
	Phase string
	// Paused, with the reason of the first StagePause covering the Stage.
	Paused bool
	Reason string
}

// stageSource walks the Stages to export, and names every phase so that the
// phase gauge is one-hot over all of them.
type stageSource struct {
	phases []string
	stages iter.Seq[StageState]
}

// stageGauges exports kargo_latch_stage_paused and kargo_latch_stage_phase
// at scrape time from a walk over the Stages, as kube-state-metrics does,
// instead of keeping a series per Stage that syncs set. A set gauge tells
// what the last sync of this replica saw: a replica that lost its Lease
// keeps exporting it forever, and a standby exports nothing. A walk over the
// replica's caches tells what is stored now, leader and standby alike, and
// keeps no series between scrapes.
type stageGauges struct {
	paused, phase *prometheus.Desc
	source        atomic.Pointer[stageSource]
}

func newStageGauges() *stageGauges {
	return &stageGauges{
		paused: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", "stage_paused"),
			"1 while a StagePause covers the Stage; reason is the first covering pause's.",
			[]string{LabelProject, LabelStage, LabelReason}, nil),
		phase: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", "stage_phase"),
			"Latch phase of each Stage: 1 for the current phase, 0 for the others.",
			[]string{LabelProject, LabelStage, LabelPhase}, nil),
	}
}

// Describe implements prometheus.Collector.
func (g *stageGauges) Describe(ch chan<- *prometheus.Desc) {
	ch <- g.paused
	ch <- g.phase
}

// Collect implements prometheus.Collector: one walk per scrape.
func (g *stageGauges) Collect(ch chan<- prometheus.Metric) {
	src := g.source.Load()
	if src == nil {
		return
	}
	for s := range src.stages {
		if s.Paused {
			ch <- prometheus.MustNewConstMetric(g.paused, prometheus.GaugeValue, 1, s.Project, s.Stage, s.Reason)
		}
		if s.Phase == "" {
			continue
		}
		for _, p := range src.phases {
			v := 0.0
			if p == s.Phase {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(g.phase, prometheus.GaugeValue, v, s.Project, s.Stage, p)
		}
	}
}

// ObserveStages makes the per-Stage gauges report stages, walked at each
// scrape; phases are all the latch phases. Until it is called they report
// nothing; a second call replaces the first.
func (r *Recorder) ObserveStages(phases []string, stages iter.Seq[StageState]) {
	r.stages.source.Store(&stageSource{phases: phases, stages: stages})
}
