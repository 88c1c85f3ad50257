package e2e

import (
	"testing"
	"time"

	"github.com/kargo-latch/kargo-latch/latch"
)

// The reliability scenario: what each Stage goes through, by kind.
const (
	kindFlapper        = iota // latch, then Progressing flaps
	kindPromotionFails        // latch, then a failed promotion: paused
	kindDegrades              // latch, then Unhealthy past the grace: paused
	kindManualPause           // latch, then a person pauses it
	kindResumed               // latch, an errored promotion pauses it, a person resumes
	kinds
)

// outcome is where a story ends: phase, failure reason, paused or not.
type outcome struct {
	phase   latch.Phase
	failure latch.FailureReason
	paused  bool
}

// contractOutcomes is where the contract's rules (contract.md, "The latch"
// and "Pauses") take each story, written from the contract and not from
// latch.Step: oracle catches wiring faults, this catches rule faults.
var contractOutcomes = map[int]outcome{
	// "After the latch, Progressing never changes the phase."
	kindFlapper: {phase: latch.PhaseLatched},
	// "lastPromotion Failed → the current cycle becomes Failed
	// (PromotionFailed)"; pause-on-failure: one StagePause.
	kindPromotionFails: {phase: latch.PhaseFailed, failure: latch.ReasonPromotionFailed, paused: true},
	// "Latched + Unhealthy → Degraded"; past the grace → Failed (Degraded).
	kindDegrades: {phase: latch.PhaseFailed, failure: latch.ReasonDegraded, paused: true},
	// "A Stage can be Latched and paused."
	kindManualPause: {phase: latch.PhaseLatched, paused: true},
	// Errored → Failed (PromotionErrored); deleting the pause resumes.
	kindResumed: {phase: latch.PhaseFailed, failure: latch.ReasonPromotionErrored},
}

// outcomeOf reads a record as an outcome.
func outcomeOf(r latch.Record, paused bool) outcome {
	o := outcome{phase: r.Phase, paused: paused}
	if r.Failure != nil {
		o.failure = r.Failure.Reason
	}
	return o
}

// oracle runs a kind's scenario through the latch state machine itself, the
// model, and returns the record the operator must end with.
func oracle(kind int) latch.Record {
	s := latch.Settings{LatchDeadline: time.Minute, DegradedGrace: time.Second, PauseOnFailure: true}
	t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p1 := &latch.Promotion{Name: "p1", Phase: latch.PromotionSucceeded, FinishedAt: &t}
	seq := []latch.Observation{
		{Stage: "s"},
		{Stage: "s", LastPromotion: p1, FreightID: "F1"},
		{Stage: "s", LastPromotion: p1, FreightID: "F1", Health: latch.HealthProgressing},
		{Stage: "s", LastPromotion: p1, FreightID: "F1", Health: latch.HealthHealthy},
	}
	switch kind {
	case kindFlapper, kindManualPause:
		for range 3 {
			seq = append(seq, seq[2], seq[3])
		}
	case kindPromotionFails, kindResumed:
		phase := latch.PromotionFailed
		if kind == kindResumed {
			phase = latch.PromotionErrored
		}
		seq = append(seq, latch.Observation{Stage: "s", FreightID: "F1", Health: latch.HealthUnknown,
			LastPromotion: &latch.Promotion{Name: "p2", Phase: phase, FinishedAt: &t}})
	case kindDegrades:
		unhealthy := seq[3]
		unhealthy.Health = latch.HealthUnhealthy
		seq = append(seq, unhealthy, unhealthy)
	}
	var r latch.Record
	for i, o := range seq {
		r = latch.Step(s, r, o, t.Add(time.Duration(i)*2*time.Second)).Record
	}
	return r
}

// The two models of the reliability scenario agree: latch.Step, run over
// each story, ends where the contract's rules say.
func TestOracleAgreesWithTheContract(t *testing.T) {
	for kind := range kinds {
		r := oracle(kind)
		if got, want := outcomeOf(r, len(r.Pauses) > 0 || contractOutcomes[kind].paused), contractOutcomes[kind]; got.phase != want.phase || got.failure != want.failure {
			t.Errorf("kind %d: latch.Step ends %+v, the contract says %+v", kind, got, want)
		}
	}
}
