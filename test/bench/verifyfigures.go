package main

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// verifyOnLatch measures, under a churn of its own, verify-on-latch's two
// hops against a PATCH→watch baseline taken in the same phase, under the
// same churn:
//
//   - V1, latch → AnalysisRun created: a busy Stage with verify-on-latch and
//     a web-metric AnalysisTemplate latches per App (as in figure 6); the
//     sample ends when the watcher's watch on AnalysisRuns sees the run the
//     operator made for the Freight collection. The operator runs with
//     --verify-grace=0 (verifyGrace), so no grace is inside the figure.
//   - V2, run Successful → verifiedIn visible: the bench plays Argo
//     Rollouts' analysis controller (none runs in the bench). Untimed, it
//     writes the run Running and waits until the record follows; timed,
//     it writes the result, Successful with completedAt, and the sample
//     ends when the watcher sees status.verifiedIn.<stage> on the Freight.
//
// Each sample takes its own verifying Stage (verifyingStages), which the
// churn leaves alone; before the next, it waits for the record that names
// the Freight marked and the analysis Successful.
func (b *bench) verifyOnLatch(ctx context.Context) ([]row, error) {
	lo, hi := b.verifyingStages()
	stages := b.busy[lo:hi]
	churn := b.startChurn(ctx, hi)
	defer churn.stop()

	say("verify-on-latch baseline: PATCH one busy Stage, observe it through a watch (%d samples)", 2*len(stages))
	pinged, err := b.pingBaseline(ctx, hi, 2*len(stages), "verify-")
	base := pinged.total
	if err != nil {
		return nil, err
	}

	say("verify-on-latch: latch → AnalysisRun seen, then run Successful → verifiedIn seen (%d samples; the bench plays the analysis controller)", len(stages))
	server, operators := b.viewServer(ctx), b.viewOperators(ctx)
	created, verified, err := b.verifySamples(ctx, stages)
	if err != nil {
		return nil, err
	}
	b.sayServerSide(ctx, "verify-on-latch", server, "LIST analysisruns", "POST analysisruns", "PATCH analysisruns", "GET analysistemplates",
		"GET freights", "PATCH freights/status", "GET stages", "PATCH stages", "PATCH stages/status", "POST events")
	b.sayOperatorSide(ctx, "verify-on-latch", operators)

	writes, promotions := churn.rates()
	load := fmt.Sprintf("; %.0f status writes/s and %.1f Promotions/s of churn achieved", writes, promotions)
	bp := percentiles(base)
	baseline := "PATCH→watch, this phase: " + bp.String() + load
	figure := func(name string, took []time.Duration) row {
		s := percentiles(took)
		return row{figure: name, value: s.String(), baseline: baseline, goal: "p99 ≤ 3× baseline p99",
			met: s.p99 <= 3*bp.p99, ratio: fmt.Sprintf("p99 %.2f×", float64(s.p99)/float64(bp.p99))}
	}
	return []row{
		figure(fmt.Sprintf("V1. latch → AnalysisRun seen (verify-on-latch, grace %v)", verifyGrace), created),
		figure("V2. run Successful → verifiedIn visible (verify-on-latch, mark-verified)", verified),
	}, nil
}

// verifySample is one sample's moments, for the splits.
type verifySample struct {
	run, freight            string
	latchWritten, runSeen   time.Time
	resultWritten, markSeen time.Time
}

// verifySamples times V1 and V2 on each Stage (see verifyOnLatch).
func (b *bench) verifySamples(ctx context.Context, stages []*driver.Stage) (created, verified []time.Duration, err error) {
	last := driver.BusyApps - 1
	var samples []verifySample
	for _, s := range stages {
		promotion, err := s.FinishPromotion(ctx, "Succeeded")
		if err != nil {
			return nil, nil, err
		}
		freight, err := s.CurrentFreight(ctx)
		if err != nil {
			return nil, nil, err
		}
		if err := s.SetBusyHealth(ctx, kargo.HealthProgressing, appsHealthyBut(last)); err != nil {
			return nil, nil, err
		}
		r, err := b.watcher.waitRecord(ctx, s.Namespace, s.Name, func(r latch.Record) bool {
			return r.Promotion == promotion && r.Phase == latch.PhasePromoted && len(r.AppsHealthy) == last
		})
		if err != nil {
			return nil, nil, err
		}

		// V1: the health write that latches the cycle → the run seen.
		t0 := time.Now()
		if err := s.SetBusyHealth(ctx, kargo.HealthProgressing, appsHealthyBut(0)); err != nil {
			return nil, nil, err
		}
		run, err := b.verify.waitRun(ctx, s.Namespace, s.Name, r.FreightID)
		if err != nil {
			return nil, nil, err
		}
		created = append(created, run.seen.Sub(t0)-verifyGrace)
		if _, err := b.watcher.waitRecord(ctx, s.Namespace, s.Name, func(r latch.Record) bool {
			return r.Promotion == promotion && r.Phase == latch.PhaseLatched && r.LatchedBy == latch.LatchedByApps &&
				r.Analysis.ByKargoLatch() && r.Analysis.Run == run.name
		}); err != nil {
			return nil, nil, err
		}

		// The analysis controller picks the run up; the record follows.
		started := time.Now()
		if _, err := b.finishRun(ctx, s.Namespace, run.name, "Running", started); err != nil {
			return nil, nil, err
		}
		if _, err := b.watcher.waitRecord(ctx, s.Namespace, s.Name, func(r latch.Record) bool {
			return r.Promotion == promotion && r.Analysis != nil && r.Analysis.Phase == latch.VerificationRunning
		}); err != nil {
			return nil, nil, err
		}

		// V2: the run's result written → verifiedIn seen on the Freight.
		t1 := time.Now()
		completedAt, err := b.finishRun(ctx, s.Namespace, run.name, "Successful", started)
		if err != nil {
			return nil, nil, err
		}
		mark, err := b.watcher.waitVerified(ctx, s.Namespace, freight, s.Name)
		if err != nil {
			return nil, nil, err
		}
		verified = append(verified, mark.seen.Sub(t1))
		samples = append(samples, verifySample{run: run.name, freight: freight, latchWritten: t0, runSeen: run.seen, resultWritten: t1, markSeen: mark.seen})
		if mark.verifiedAt != completedAt {
			return nil, nil, fmt.Errorf("freight %s: verifiedIn.%s.verifiedAt is %q, want the run's completedAt %s", freight, s.Name, mark.verifiedAt, completedAt)
		}
		if _, err := b.watcher.waitRecord(ctx, s.Namespace, s.Name, func(r latch.Record) bool {
			return r.Promotion == promotion && marked(r, freight) && r.Analysis != nil && r.Analysis.Phase == latch.VerificationSuccessful
		}); err != nil {
			return nil, nil, err
		}
	}
	b.explainVerify(samples)
	return created, verified, nil
}

// explainVerify splits each hop at the operator's own request, from its
// log: V1 at the run's create returning, V2 at the Freight's PATCH
// returning. It only reports; a missing log line loses the split.
func (b *bench) explainVerify(samples []verifySample) {
	started, marks := map[string]time.Time{}, map[string]time.Time{}
	for _, op := range b.operators {
		maps.Copy(started, startedInLog(op.logPath))
		maps.Copy(marks, markedInLog(op.logPath))
	}
	var toCreate, createHop, toMark, markHop []time.Duration
	for _, s := range samples {
		if at, ok := started[s.run]; ok {
			toCreate, createHop = append(toCreate, at.Sub(s.latchWritten)), append(createHop, s.runSeen.Sub(at))
		}
		if at, ok := marks[s.freight]; ok {
			toMark, markHop = append(toMark, at.Sub(s.resultWritten)), append(markHop, s.markSeen.Sub(at))
		}
	}
	if len(toCreate) > 0 {
		say("latch → AnalysisRun, split: status write → the operator's create returned %v; → the watcher saw it %v", percentiles(toCreate), percentiles(createHop))
	} else {
		say("latch → AnalysisRun: no \"Started the Stage's verification\" lines in the operator's log to split the samples")
	}
	if len(toMark) > 0 {
		say("run Successful → verifiedIn, split: result written → the operator's Freight PATCH returned %v; → the watcher saw it %v", percentiles(toMark), percentiles(markHop))
	}
}
