package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// verifiedLatency times, under the churn, the product's headline path: a
// busy Stage whose Apps flap out of phase latches per App, and its Freight
// becomes verified in the Stage, which is what lets it flow downstream.
//
// Each sample takes a latched, idle busy Stage and, untimed, makes Kargo
// record a new successful promotion of new Freight and report every App but
// the last Healthy (the aggregate Progressing), and waits until the
// operator has recorded those Apps. Then, timed, it writes the health in
// which the last App is Healthy and the first one Progressing: the aggregate
// is still Progressing, but every App has now been Healthy in the cycle, so
// the cycle latches. The sample ends when the watcher sees
// status.verifiedIn.<stage> on the Freight. Before the next sample it waits
// for the record that names the Freight marked, so that no write of a
// measured cycle is left over for the steady state.
func (b *bench) verifiedLatency(ctx context.Context, stages []*driver.Stage) ([]time.Duration, error) {
	last := driver.BusyApps - 1
	var took []time.Duration
	var samples []markSample
	server, operators := b.viewServer(ctx), b.viewOperators(ctx)
	for _, s := range stages {
		promotion, err := s.FinishPromotion(ctx, "Succeeded")
		if err != nil {
			return nil, err
		}
		freight, err := s.CurrentFreight(ctx)
		if err != nil {
			return nil, err
		}
		if err := s.SetBusyHealth(ctx, kargo.HealthProgressing, appsHealthyBut(last)); err != nil {
			return nil, err
		}
		if _, err := b.watcher.waitRecord(ctx, busyNS, s.Name, func(r latch.Record) bool {
			return r.Promotion == promotion && r.Phase == latch.PhasePromoted && len(r.AppsHealthy) == last
		}); err != nil {
			return nil, err
		}

		t0 := time.Now()
		if err := s.SetBusyHealth(ctx, kargo.HealthProgressing, appsHealthyBut(0)); err != nil {
			return nil, err
		}
		mark, err := b.watcher.waitVerified(ctx, busyNS, freight, s.Name)
		if err != nil {
			return nil, err
		}
		took = append(took, mark.seen.Sub(t0))
		samples = append(samples, markSample{freight: freight, written: t0, seen: mark.seen})

		r, err := b.watcher.waitRecord(ctx, busyNS, s.Name, func(r latch.Record) bool {
			return r.Promotion == promotion && marked(r, freight)
		})
		if err != nil {
			return nil, err
		}
		if r.Phase != latch.PhaseLatched || r.LatchedBy != latch.LatchedByApps || r.LatchedAt == nil {
			return nil, fmt.Errorf("stage %s: cycle %s is %s by %q, want Latched by %s", s.Name, promotion, r.Phase, r.LatchedBy, latch.LatchedByApps)
		}
		if want := r.LatchedAt.UTC().Format(time.RFC3339); mark.verifiedAt != want {
			return nil, fmt.Errorf("freight %s: verifiedIn.%s.verifiedAt is %q, want latchedAt %s", freight, s.Name, mark.verifiedAt, want)
		}
	}
	b.explainMarks(samples)
	b.sayServerSide(ctx, "mark verified", server, "GET freights", "POST events", "PATCH freights/status", "POST freights", "PATCH stages", "PATCH stages/status", "GET stages", "GET stagepauses", "LIST stagepauses")
	b.sayOperatorSide(ctx, "mark verified", operators)
	return took, nil
}

type markSample struct {
	freight       string
	written, seen time.Time
}

// explainMarks splits each sample in two at the moment the operator's
// patch of the Freight returned, which it logs: the status write itself,
// its way to the operator (the Stage's watch event, the queue) and the
// operator's requests up to the Freight's PATCH, then the Freight's way to
// the watcher. With shards, each shard's operator logs its own marks. It only reports; a missing log line loses the split, not
// the sample.
func (b *bench) explainMarks(samples []markSample) {
	logged := map[string]time.Time{}
	for _, op := range b.operators {
		maps.Copy(logged, markedInLog(op.logPath))
	}
	var operator, hop []time.Duration
	for _, s := range samples {
		if at, ok := logged[s.freight]; ok {
			operator, hop = append(operator, at.Sub(s.written)), append(hop, s.seen.Sub(at))
		}
	}
	if len(operator) == 0 {
		say("latch → verifiedIn: no \"Marked Freight verified\" lines in the operator's log to split the samples")
		return
	}
	say("latch → verifiedIn, split: status write → the operator's Freight PATCH returned %v; → the watcher saw it %v",
		percentiles(operator), percentiles(hop))
}

// markedLine is klog's text line for a mark, e.g.
// I1130 09:58:36.123456    1234 marker.go:96] "Marked Freight verified in the Stage" stage="bench/stage-00061" freight="4f9e…"
var markedLine = regexp.MustCompile(`^I(\d{4} \d{2}:\d{2}:\d{2}\.\d{6}) .*"Marked Freight verified in the Stage".* freight="([0-9a-f]+)"`)

// markedInLog maps each Freight the operator logged as marked to when.
func markedInLog(path string) map[string]time.Time {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	year := time.Now().Year()
	out := map[string]time.Time{}
	for _, line := range strings.Split(string(data), "\n") {
		m := markedLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, err := time.ParseInLocation("0102 15:04:05.000000", m[1], time.Local)
		if err != nil {
			continue
		}
		out[m[2]] = at.AddDate(year-at.Year(), 0, 0)
	}
	return out
}

// appsHealthyBut gives every App Healthy but the one at index progressing.
func appsHealthyBut(progressing int) func(int) string {
	return func(app int) string {
		if app == progressing {
			return kargo.HealthProgressing
		}
		return kargo.HealthHealthy
	}
}
