package main

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

type row struct {
	figure, value, baseline, goal, ratio string
	met                                  bool
}

type stats struct {
	p50, p95, p99, max time.Duration
	n                  int
}

func percentiles(d []time.Duration) stats {
	s := slices.Clone(d)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return stats{p50: at(0.50), p95: at(0.95), p99: at(0.99), max: s[len(s)-1], n: len(s)}
}

func (s stats) String() string {
	return fmt.Sprintf("p50 %v, p99 %v, max %v (%d samples)", ms(s.p50), ms(s.p99), ms(s.max), s.n)
}

// withP95 says s with p95 instead of p99: the dashboard's goals are p95s,
// on 20 samples, of which a p99 is the maximum.
func (s stats) withP95() string {
	return fmt.Sprintf("p50 %v, p95 %v, max %v (%d samples)", ms(s.p50), ms(s.p95), ms(s.max), s.n)
}

// ms rounds a duration for the report.
func ms(d time.Duration) time.Duration { return d.Round(100 * time.Microsecond) }

func printTable(out io.Writer, o options, l load, rows []row) {
	fmt.Fprintf(out, "\nkargo-latch bench — %d busy Stages, %d under one project pause, %d status writes/s of churn asked, %s, %d CPUs\n",
		o.stages, o.wide, o.churn, runtime.Version(), runtime.NumCPU())
	if o.shards > 0 {
		fmt.Fprintf(out, "%d shards (s0..s%d), one operator each; the Stages spread over them\n", o.shards, o.shards-1)
	}
	if l.promotions > 0 {
		fmt.Fprintf(out, "%d terminal Promotions (%.1f KB each as stored, %s) and %d Freight (%s), created in %v (%.0f objects/s); %.1f new Promotions/s during the churn\n",
			l.promotions, kib(l.promotionBytes)/float64(l.promotions), mb(l.promotionBytes), l.freight, mb(l.freightSize),
			l.createdIn.Round(time.Second), float64(l.promotions+l.freight)/l.createdIn.Seconds(), l.promotionChurn)
	}
	fmt.Fprintln(out)
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "FIGURE\tMEASURED\tBASELINE (same run)\tRATIO\tGOAL\tMET")
	// Each step reports the figures it measured; the table is in figure order.
	rows = slices.Clone(rows)
	slices.SortStableFunc(rows, func(a, b row) int { return strings.Compare(a.figure, b.figure) })
	for _, r := range rows {
		met := "no"
		if r.met {
			met = "yes"
		}
		fmt.Fprintln(w, strings.Join([]string{r.figure, r.value, r.baseline, dash(r.ratio), r.goal, met}, "\t"))
	}
	_ = w.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
