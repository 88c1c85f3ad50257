package main

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kargo-latch/kargo-latch/metrics"
)

// Family is one metric family as it is scraped. A histogram's family is
// scraped as its _bucket, _sum and _count series.
type Family struct {
	Name   string   `json:"name"`
	Type   string   `json:"type"` // counter, gauge, histogram or untyped
	Labels []string `json:"labels"`
}

// operatorFamilies registers the operator's metrics as cmd/kargo-latch does
// and describes every family. It reads the descriptions, not a Gather: a
// vector without a series yet is not gathered, and most of the operator's
// are vectors that get their first series from the first event.
func operatorFamilies() ([]Family, error) {
	reg := &describingRegisterer{}
	metrics.New(reg, "")
	metrics.NewWorkqueueProvider(reg)
	if reg.err != nil {
		return nil, reg.err
	}
	slices.SortFunc(reg.families, func(a, b Family) int { return strings.Compare(a.Name, b.Name) })
	return reg.families, nil
}

// describingRegisterer is a prometheus.Registerer that keeps a description
// of what is registered on it.
type describingRegisterer struct {
	families []Family
	err      error
}

func (r *describingRegisterer) Register(c prometheus.Collector) error {
	descs := make(chan *prometheus.Desc)
	go func() {
		c.Describe(descs)
		close(descs)
	}()
	for d := range descs {
		f, err := family(d, typeOf(c))
		if err != nil {
			r.err = errors.Join(r.err, err)
			continue
		}
		r.families = append(r.families, f)
	}
	return nil
}

func (r *describingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = r.Register(c)
	}
}

func (r *describingRegisterer) Unregister(prometheus.Collector) bool { return false }

// typeOf tells a family's type by the Go type of its collector; a custom
// collector (the per-Stage gauges) is untyped here, which is enough for the
// dashboard check: it must only know which families are histograms.
func typeOf(c prometheus.Collector) string {
	switch c.(type) {
	case prometheus.Histogram, *prometheus.HistogramVec:
		return "histogram"
	case *prometheus.CounterVec:
		return "counter"
	case *prometheus.GaugeVec:
		return "gauge"
	case prometheus.Gauge: // before Counter: a Gauge has Inc and Add too
		return "gauge"
	case prometheus.Counter:
		return "counter"
	default:
		return "untyped"
	}
}

// Desc offers its name and labels only through String, as
// Desc{fqName: "…", help: "…", …, variableLabels: {a,b}}.
var (
	descName   = regexp.MustCompile(`fqName: ("(?:[^"\\]|\\.)*")`)
	descLabels = regexp.MustCompile(`variableLabels: \{([^}]*)\}`)
)

func family(d *prometheus.Desc, typ string) (Family, error) {
	s := d.String()
	name, labels := descName.FindStringSubmatch(s), descLabels.FindStringSubmatch(s)
	if name == nil || labels == nil {
		return Family{}, fmt.Errorf("cannot read the name and labels of %s: has client_golang's Desc.String changed?", s)
	}
	unquoted, err := strconv.Unquote(name[1])
	if err != nil {
		return Family{}, fmt.Errorf("the name in %s: %w", s, err)
	}
	f := Family{Name: unquoted, Type: typ, Labels: []string{}}
	if labels[1] != "" {
		for _, l := range strings.Split(labels[1], ",") {
			// A label with a constraint shows as c(name).
			f.Labels = append(f.Labels, strings.TrimSuffix(strings.TrimPrefix(l, "c("), ")"))
		}
	}
	return f, nil
}
