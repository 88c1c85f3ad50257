package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/util/workqueue"
)

// WorkqueueProvider gives client-go's workqueues kargo_latch_workqueue_*
// metrics on an injected Registerer instead of a global one.
type WorkqueueProvider struct {
	depth, unfinished, longestRunning *prometheus.GaugeVec
	adds, retries                     *prometheus.CounterVec
	latency, workDuration             *prometheus.HistogramVec
}

// NewWorkqueueProvider registers the workqueue metrics on reg.
func NewWorkqueueProvider(reg prometheus.Registerer) *WorkqueueProvider {
	name := []string{"name"}
	secs := prometheus.ExponentialBuckets(10e-9, 10, 12)
	depth := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Subsystem: "workqueue", Name: "depth", Help: "Current depth of the workqueue."}, name)
	adds := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "workqueue", Name: "adds_total", Help: "Adds handled by the workqueue."}, name)
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Subsystem: "workqueue", Name: "queue_duration_seconds", Help: "Time an item waits in the workqueue before it is handled.", Buckets: secs}, name)
	work := prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: Namespace, Subsystem: "workqueue", Name: "work_duration_seconds", Help: "Time handling an item takes.", Buckets: secs}, name)
	unfinished := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Subsystem: "workqueue", Name: "unfinished_work_seconds", Help: "Seconds of work in progress not yet observed by work_duration."}, name)
	longest := prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: Namespace, Subsystem: "workqueue", Name: "longest_running_processor_seconds", Help: "Seconds the longest running processor has been running."}, name)
	retries := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Subsystem: "workqueue", Name: "retries_total", Help: "Retries handled by the workqueue."}, name)
	reg.MustRegister(depth, adds, latency, work, unfinished, longest, retries)
	return &WorkqueueProvider{
		depth: depth, unfinished: unfinished, longestRunning: longest,
		adds: adds, retries: retries,
		latency: latency, workDuration: work,
	}
}

// NewDepthMetric implements workqueue.MetricsProvider.
func (p *WorkqueueProvider) NewDepthMetric(n string) workqueue.GaugeMetric {
	return p.depth.WithLabelValues(n)
}

// NewAddsMetric implements workqueue.MetricsProvider.
func (p *WorkqueueProvider) NewAddsMetric(n string) workqueue.CounterMetric {
	return p.adds.WithLabelValues(n)
}

// NewLatencyMetric implements workqueue.MetricsProvider.
func (p *WorkqueueProvider) NewLatencyMetric(n string) workqueue.HistogramMetric {
	return p.latency.WithLabelValues(n)
}

// NewWorkDurationMetric implements workqueue.MetricsProvider.
func (p *WorkqueueProvider) NewWorkDurationMetric(n string) workqueue.HistogramMetric {
	return p.workDuration.WithLabelValues(n)
}

// NewUnfinishedWorkSecondsMetric implements workqueue.MetricsProvider.
func (p *WorkqueueProvider) NewUnfinishedWorkSecondsMetric(n string) workqueue.SettableGaugeMetric {
	return p.unfinished.WithLabelValues(n)
}

// NewLongestRunningProcessorSecondsMetric implements workqueue.MetricsProvider.
func (p *WorkqueueProvider) NewLongestRunningProcessorSecondsMetric(n string) workqueue.SettableGaugeMetric {
	return p.longestRunning.WithLabelValues(n)
}

// NewRetriesMetric implements workqueue.MetricsProvider.
func (p *WorkqueueProvider) NewRetriesMetric(n string) workqueue.CounterMetric {
	return p.retries.WithLabelValues(n)
}
