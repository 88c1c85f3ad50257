package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
)

// metricsView is a process's own account of its work, read from its
// /metrics: for the apiserver, how long each kind of request took inside
// it and how long requests waited in API Priority and Fairness queues; for
// the operator, its queue waits, syncs, errors and retries. Two views taken
// around a phase split a slow figure into the server's share, the
// operator's, and the rest (transport, watch delivery).
type metricsView map[string]*histogram

// histogram is a cumulative Prometheus histogram.
type histogram struct {
	count  uint64
	sum    float64
	bounds []float64
	counts []uint64 // cumulative, per bound
}

// viewAPIServer reads the apiserver's request-duration and APF-wait
// histograms, summed per "VERB resource[/subresource]" and per priority
// level.
func viewAPIServer(ctx context.Context, kube kubernetes.Interface) (metricsView, error) {
	body, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	families, err := parseMetrics(body)
	if err != nil {
		return nil, err
	}
	view := metricsView{}
	for _, m := range families["apiserver_request_duration_seconds"].GetMetric() {
		l := labels(m)
		key := l["verb"] + " " + l["resource"]
		if l["subresource"] != "" {
			key += "/" + l["subresource"]
		}
		view.add(key, m.GetHistogram())
	}
	for _, m := range families["apiserver_flowcontrol_request_wait_duration_seconds"].GetMetric() {
		if l := labels(m); l["execute"] == "true" {
			view.add("APF wait, "+l["priority_level"], m.GetHistogram())
		}
	}
	return view, nil
}

// viewOperator reads the operator's own account of its work from its
// /metrics: how long Stages waited in its queue and how long their syncs
// took (histograms), and, as histograms of one sample each so that since
// applies, its reconcile errors and retries.
func viewOperator(ctx context.Context, url string) (metricsView, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	families, err := parseMetrics(body)
	if err != nil {
		return nil, err
	}
	view := metricsView{}
	for _, m := range families["kargo_latch_workqueue_queue_duration_seconds"].GetMetric() {
		view.add("queue wait, "+labels(m)["name"], m.GetHistogram())
	}
	for _, m := range families["kargo_latch_workqueue_work_duration_seconds"].GetMetric() {
		view.add("sync, "+labels(m)["name"], m.GetHistogram())
	}
	for _, m := range families["kargo_latch_urgent_queue_wait_seconds"].GetMetric() {
		view.add("queue wait, urgent stages", m.GetHistogram())
	}
	counters := map[string]string{
		"kargo_latch_reconcile_errors_total": "failed syncs",
		// The workqueue counts every delayed add: a failed sync's retry, and
		// a time-based transition's requeue alike.
		"kargo_latch_workqueue_retries_total": "delayed adds (retries and timed requeues)",
		"kargo_latch_freight_verified_total":  "Freight marked",
	}
	for name, key := range counters {
		var total float64
		for _, m := range families[name].GetMetric() {
			total += m.GetCounter().GetValue()
		}
		count := uint64(total)
		view[key] = &histogram{count: count, counts: []uint64{count}, bounds: []float64{math.Inf(1)}}
	}
	return view, nil
}

func parseMetrics(body []byte) (map[string]*dto.MetricFamily, error) {
	parser := expfmt.NewTextParser(model.LegacyValidation)
	return parser.TextToMetricFamilies(bytes.NewReader(body))
}

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, p := range m.GetLabel() {
		out[p.GetName()] = p.GetValue()
	}
	return out
}

func (v metricsView) add(key string, h *dto.Histogram) {
	sum := v[key]
	if sum == nil {
		sum = &histogram{}
		for _, b := range h.GetBucket() {
			sum.bounds = append(sum.bounds, b.GetUpperBound())
		}
		sum.counts = make([]uint64, len(sum.bounds))
		v[key] = sum
	}
	sum.count += h.GetSampleCount()
	sum.sum += h.GetSampleSum()
	for i, b := range h.GetBucket() {
		if i < len(sum.counts) {
			sum.counts[i] += b.GetCumulativeCount()
		}
	}
}

// since is what happened between an earlier view and this one.
func (v metricsView) since(before metricsView) metricsView {
	out := metricsView{}
	for key, h := range v {
		d := &histogram{count: h.count, sum: h.sum, bounds: h.bounds, counts: slices.Clone(h.counts)}
		if b := before[key]; b != nil {
			d.count -= b.count
			d.sum -= b.sum
			for i := range d.counts {
				if i < len(b.counts) {
					d.counts[i] -= b.counts[i]
				}
			}
		}
		if d.count > 0 {
			out[key] = d
		}
	}
	return out
}

// quantile estimates the q-quantile as Prometheus's histogram_quantile does:
// linearly within the bucket that holds it.
func (h *histogram) quantile(q float64) time.Duration {
	rank := q * float64(h.count)
	lower, below := 0.0, uint64(0)
	for i, c := range h.counts {
		if float64(c) >= rank {
			upper := h.bounds[i]
			if math.IsInf(upper, 1) {
				return time.Duration(lower * float64(time.Second))
			}
			frac := (rank - float64(below)) / float64(max(1, c-below))
			return time.Duration((lower + (upper-lower)*frac) * float64(time.Second))
		}
		lower, below = h.bounds[i], c
	}
	return time.Duration(lower * float64(time.Second))
}

// describe reports the requests of the given kinds, e.g. "GET freights".
func (v metricsView) describe(keys ...string) string {
	var parts []string
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }
	for _, key := range keys {
		h := v[key]
		if h == nil {
			continue
		}
		if len(h.bounds) == 1 {
			parts = append(parts, fmt.Sprintf("%s: %d", key, h.count))
			continue
		}
		mean := time.Duration(h.sum / float64(h.count) * float64(time.Second))
		parts = append(parts, fmt.Sprintf("%s: %d, mean %v, p50 ~%v, p99 ~%v", key, h.count, r(mean), r(h.quantile(0.5)), r(h.quantile(0.99))))
	}
	return strings.Join(parts, "; ")
}

// keysWith lists the view's keys that start with prefix, sorted.
func (v metricsView) keysWith(prefix string) []string {
	var keys []string
	for k := range v {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}
