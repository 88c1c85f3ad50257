package main

import (
	"context"
	"fmt"
	"time"
)

// reaction times, under churn, the raw PATCH→watch round trip, the
// operator's reaction to failures and its latch → verifiedIn path, and then
// counts its writes in a steady state. The failures and the marked cycles
// take their own busy Stages, which the churn leaves alone. The churn is
// Kargo's: health flaps written to Stage status, and new Promotions run
// through their lifecycle.
func (b *bench) reaction(ctx context.Context) ([]row, error) {
	spare := min(b.o.samples, len(b.busy)/4)
	failing, marking := b.busy[:spare], b.busy[spare:2*spare]
	reserved := 2 * spare
	churn := b.startChurn(ctx, reserved)
	defer churn.stop()

	say("baseline: PATCH one busy Stage, observe it through a watch (%d samples)", 2*b.o.samples)
	server := b.viewServer(ctx)
	pinged, err := b.pingBaseline(ctx, reserved, 2*b.o.samples, "")
	if err != nil {
		return nil, err
	}
	base, request, hop := pinged.total, pinged.request, pinged.hop
	say("baseline, split: the PATCH returned %v; → the watcher saw it %v", percentiles(request), percentiles(hop))
	b.sayServerSide(ctx, "baseline", server, "PATCH stages", "PATCH stages/status")

	say("reaction: a promotion fails; time until a watcher sees the StagePause (the gate closed), then the paused label (%d samples)", len(failing))
	gate, react := make([]time.Duration, 0, len(failing)), make([]time.Duration, 0, len(failing))
	traced := make([]failureSample, 0, len(failing))
	server, operators := b.viewServer(ctx), b.viewOperators(ctx)
	for _, s := range failing {
		t0 := time.Now()
		if _, err := s.FinishPromotion(ctx, "Failed"); err != nil {
			return nil, err
		}
		closed, err := b.watcher.waitGateClosed(ctx, busyNS, s.Name)
		if err != nil {
			return nil, err
		}
		if closed.Before(t0) {
			return nil, fmt.Errorf("stage %s had a StagePause before its failure: the sample would not time one", s.Name)
		}
		seen, err := b.watcher.waitPaused(ctx, busyNS, s.Name)
		if err != nil {
			return nil, err
		}
		gate, react = append(gate, closed.Sub(t0)), append(react, seen.Sub(t0))
		traced = append(traced, failureSample{stage: s.Namespace + "/" + s.Name, wrote: t0, closed: closed})
		time.Sleep(50 * time.Millisecond)
	}
	say("reaction, split: failure → StagePause seen %v; StagePause → paused label seen %v", percentiles(gate), percentiles(subtract(react, gate)))
	b.sayTrace(traced)

	b.sayServerSide(ctx, "reaction", server, "GET stages", "POST stagepauses", "POST events", "PATCH stages", "PATCH stages/status")
	b.sayOperatorSide(ctx, "reaction", operators)

	say("mark verified: every App Healthy in the cycle; time until a watcher sees verifiedIn on the Freight (%d samples)", len(marking))
	verified, err := b.verifiedLatency(ctx, marking)
	if err != nil {
		return nil, err
	}

	say("steady state: counting the operator's writes during %v of churn", b.o.steadyFor)
	stagesBefore, marksBefore := b.watcher.operatorWrites()
	time.Sleep(b.o.steadyFor)
	stagesAfter, marksAfter := b.watcher.operatorWrites()
	stageWrites, marks := stagesAfter-stagesBefore, marksAfter-marksBefore
	writes := stageWrites + marks
	perStageHour := float64(writes) / float64(len(b.busy)) / b.o.steadyFor.Hours()
	rate, promotionRate := churn.rates()
	b.load.promotionChurn = promotionRate

	bp, gp, rp, vp := percentiles(base), percentiles(gate), percentiles(react), percentiles(verified)
	rows := []row{
		gateRow("1a. failure → gate closed (StagePause seen)", gp, bp),
		reactionRow("1b. failure → paused label seen", rp, bp),
		{figure: "5. steady-state writes", value: fmt.Sprintf("%d writes in %v: %d to Stages, %d Freight marks (%.3f per Stage per hour)", writes, b.o.steadyFor, stageWrites, marks, perStageHour),
			baseline: fmt.Sprintf("%.0f status writes/s and %.1f Promotions/s of churn achieved", rate, b.load.promotionChurn), goal: "0", met: writes == 0},
		{figure: "6. latch → verifiedIn visible (per-App latch, mark-verified)", value: vp.String(), baseline: "PATCH→watch " + bp.String(),
			goal: "p99 ≤ 3× baseline p99", met: vp.p99 <= bp.p99*3, ratio: fmt.Sprintf("p99 %.2f×", float64(vp.p99)/float64(bp.p99))},
	}
	if b.o.shards > 0 {
		// Each shard's operator against the same baseline: the PATCH→watch
		// round trip does not depend on who handles the Stage.
		gateBy, reactBy := make([][]time.Duration, len(b.operators)), make([][]time.Duration, len(b.operators))
		for i, s := range failing {
			k := b.operatorOf(s)
			gateBy[k], reactBy[k] = append(gateBy[k], gate[i]), append(reactBy[k], react[i])
		}
		for k := range reactBy {
			if len(reactBy[k]) > 0 {
				rows = append(rows, gateRow("1a. gate closed, "+b.operators[k].name(), percentiles(gateBy[k]), bp),
					reactionRow("1b. paused label, "+b.operators[k].name(), percentiles(reactBy[k]), bp))
			}
		}
	}
	return rows, nil
}

func reactionRow(figure string, reaction, baseline stats) row {
	return row{figure: figure, value: reaction.String(), baseline: "PATCH→watch " + baseline.String(),
		goal: "p99 ≤ 2.5× baseline p99", met: reaction.p99 <= baseline.p99*5/2, ratio: fmt.Sprintf("p99 %.2f×", float64(reaction.p99)/float64(baseline.p99))}
}

// gateRow is figure 1a: the pause is in force once its StagePause exists
// (the gate reads it as a parameter). On its path: the failure's watch
// event, the sync's reads from cache (and a live GET of the Stage only when
// the cache does not show this replica's last record), one create.
func gateRow(figure string, gate, baseline stats) row {
	return row{figure: figure, value: gate.String(), baseline: "PATCH→watch " + baseline.String(),
		goal: "p99 ≤ 1.8× baseline p99", met: gate.p99 <= baseline.p99*9/5, ratio: fmt.Sprintf("p99 %.2f×", float64(gate.p99)/float64(baseline.p99))}
}

// subtract is a[i] - b[i], pairwise.
func subtract(a, b []time.Duration) []time.Duration {
	d := make([]time.Duration, len(a))
	for i := range a {
		d[i] = a[i] - b[i]
	}
	return d
}
