package main

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
)

// apiserverView is the apiserver's own account of the requests it served,
// from its /metrics: how long each kind of request took inside the
// apiserver, and how long requests waited in API Priority and Fairness
// queues. Two views taken around a phase tell the server's share of a
// round trip from the client's: transport, watch delivery, the client's own
// queues.
type apiserverView map[string]*histogram

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
func viewAPIServer(ctx context.Context, kube kubernetes.Interface) (apiserverView, error) {
	body, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, err
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	view := apiserverView{}
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

func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, p := range m.GetLabel() {
		out[p.GetName()] = p.GetValue()
	}
	return out
}

func (v apiserverView) add(key string, h *dto.Histogram) {
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
func (v apiserverView) since(before apiserverView) apiserverView {
	out := apiserverView{}
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
func (v apiserverView) describe(keys ...string) string {
	var parts []string
	r := func(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }
	for _, key := range keys {
		h := v[key]
		if h == nil {
			continue
		}
		mean := time.Duration(h.sum / float64(h.count) * float64(time.Second))
		parts = append(parts, fmt.Sprintf("%s: %d, mean %v, p50 ~%v, p99 ~%v", key, h.count, r(mean), r(h.quantile(0.5)), r(h.quantile(0.99))))
	}
	return strings.Join(parts, "; ")
}

// keysWith lists the view's keys that start with prefix, sorted.
func (v apiserverView) keysWith(prefix string) []string {
	var keys []string
	for k := range v {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}
