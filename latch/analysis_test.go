package latch

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// verifying is the settings of a Stage with verify-on-latch and a grace of
// 10 s, a pickup timeout of 2 min, and pause-on-failure.
func verifying() Settings {
	s := defaults()
	s.VerifyOnLatch, s.VerifyGrace, s.VerifyPickupTimeout, s.PauseOnFailure = true, 10*time.Second, 2*time.Minute, true
	return s
}

// latchedView is what Kargo shows of the latched cycle p1 under flapping
// health: Progressing, a configured verification, none started by Kargo.
func latchedView() Observation {
	o := stageAfterP1(HealthProgressing)
	o.Stage, o.HasVerification, o.FreightNames, o.PreviousHealth = "test", true, []string{"f-p1"}, HealthProgressing
	return o
}

var cycleRun = RunName("test", "F1", "F1/p1", 1)

func ownRun(phase VerificationPhase) Run {
	return Run{Name: cycleRun, Collection: "F1", Ours: true, Created: at(minutes(3)), Phase: phase, StartedAt: ptr(minutes(3))}
}

func started() Record {
	r := latched()
	r.Analysis = &Analysis{ID: cycleRun, Actor: Actor, Run: cycleRun, Attempt: 1, StartTime: ptr(minutes(3))}
	return r
}

func kinds(res Result) []ActionKind {
	var k []ActionKind
	for _, a := range res.Actions {
		k = append(k, a.Kind)
	}
	return k
}

func TestVerifyOnLatchWaitsForKargoThenStarts(t *testing.T) {
	// Within the grace: nothing, and a look when it ends.
	res := Step(verifying(), latched(), latchedView(), at(minutes(2)+5*time.Second))
	if len(res.Actions) != 0 || res.Record.Analysis != nil {
		t.Fatalf("within the grace: %v, analysis %+v", kinds(res), res.Record.Analysis)
	}
	if res.RequeueAfter != 5*time.Second {
		t.Errorf("requeue = %v, want 5s (the grace's end)", res.RequeueAfter)
	}
	// Past it: the run is asked for, and the record names it already.
	res = Step(verifying(), latched(), latchedView(), at(minutes(3)))
	if diff := cmp.Diff([]ActionKind{ActionStartVerification, ActionVerificationStarted}, kinds(res)); diff != "" {
		t.Fatalf("actions (-want +got):\n%s", diff)
	}
	if a := res.Record.Analysis; a == nil || a.Run != cycleRun || a.Actor != Actor || a.Attempt != 1 {
		t.Fatalf("analysis = %+v", a)
	}
	// The same judgement again asks for the same run: exactly one per cycle.
	again := Step(verifying(), latched(), latchedView(), at(minutes(4)))
	if a, _ := again.Action(ActionStartVerification); a.Run != cycleRun {
		t.Errorf("a replayed judgement asks for %q, want %q", a.Run, cycleRun)
	}
}

func TestVerifyOnLatchFollowsKargo(t *testing.T) {
	obs := with(latchedView(), func(o *Observation) {
		o.Verification = &Verification{ID: "k1", Phase: VerificationRunning, Run: "test.01abc.f1"}
	})
	res := Step(verifying(), latched(), obs, at(minutes(5)))
	if res.Has(ActionStartVerification) {
		t.Fatal("started a run although Kargo verifies")
	}
	want := &Analysis{ID: "k1", Actor: KargoActor, Run: "test.01abc.f1", Phase: VerificationRunning}
	if diff := cmp.Diff(want, res.Record.Analysis); diff != "" {
		t.Errorf("analysis (-want +got):\n%s", diff)
	}
	// A run Kargo's lookup would find, before its status names it.
	obs = with(latchedView(), func(o *Observation) {
		o.Runs = []Run{{Name: "test.01abc.f1", Collection: "F1", Created: at(minutes(2))}}
	})
	res = Step(verifying(), latched(), obs, at(minutes(5)))
	if res.Has(ActionStartVerification) || res.Record.Analysis == nil || res.Record.Analysis.Actor != KargoActor {
		t.Errorf("with Kargo's run found: %v, %+v", kinds(res), res.Record.Analysis)
	}
}

func TestVerifyOnLatchAdoptsItsOwnRunAfterACrash(t *testing.T) {
	obs := with(latchedView(), func(o *Observation) { o.Runs = []Run{ownRun("")} })
	res := Step(verifying(), latched(), obs, at(minutes(4)))
	if res.Has(ActionStartVerification) {
		t.Fatal("asked for a second run")
	}
	if !res.Has(ActionVerificationStarted) || res.Record.Analysis.Run != cycleRun {
		t.Errorf("adoption: %v, %+v", kinds(res), res.Record.Analysis)
	}
}

func TestVerifyOnLatchResults(t *testing.T) {
	for _, tc := range []struct {
		phase  VerificationPhase
		reason FailureReason
	}{
		{VerificationSuccessful, ""},
		{VerificationFailed, ReasonVerificationFailed},
		{VerificationError, ReasonVerificationError},
		{VerificationInconclusive, ReasonVerificationInconclusive},
	} {
		t.Run(string(tc.phase), func(t *testing.T) {
			run := ownRun(tc.phase)
			run.FinishedAt = ptr(minutes(6))
			run.Message = "metric ok"
			obs := with(latchedView(), func(o *Observation) { o.Runs = []Run{run} })
			res := Step(verifying(), started(), obs, at(minutes(7)))
			done, ok := res.Action(ActionVerificationFinished)
			if !ok || done.Phase != tc.phase || done.TimeToResult != minutes(4) {
				t.Fatalf("finished = %+v (%v)", done, ok)
			}
			a := res.Record.Analysis
			if a.Phase != tc.phase || a.FinishTime == nil || !a.FinishTime.Equal(at(minutes(6))) {
				t.Errorf("analysis = %+v", a)
			}
			if tc.reason == "" {
				if res.Record.Phase != PhaseLatched || res.Has(ActionFailed) {
					t.Errorf("a successful run failed the cycle: %v", kinds(res))
				}
				return
			}
			if res.Record.Failure == nil || res.Record.Failure.Reason != tc.reason || !res.Has(ActionCreatePause) {
				t.Errorf("failure = %+v, actions %v", res.Record.Failure, kinds(res))
			}
			// Judged once: the stored result is not judged again.
			again := Step(verifying(), res.Record, obs, at(minutes(8)))
			if again.Has(ActionVerificationFinished) || again.Has(ActionFailed) {
				t.Errorf("judged twice: %v", kinds(again))
			}
		})
	}
}

func TestVerifyOnLatchMarksAtTheRunsFinish(t *testing.T) {
	s := verifying()
	s.MarkVerified = true
	rec := started()
	rec.Analysis.Phase, rec.Analysis.FinishTime = VerificationSuccessful, ptr(minutes(6))
	obs := with(latchedView(), func(o *Observation) { o.MayMark = true })
	res := Step(s, rec, obs, at(minutes(7)))
	a, ok := res.Action(ActionMarkVerified)
	if !ok || !a.VerifiedAt.Equal(at(minutes(6))) {
		t.Fatalf("mark = %+v (%v)", a, ok)
	}
	// Not before the run succeeded.
	rec = started()
	rec.Analysis.Phase = VerificationRunning
	if res := Step(s, rec, obs, at(minutes(7))); res.Has(ActionMarkVerified) {
		t.Error("marked while the run was running")
	}
}

func TestVerifyOnLatchCutsShortThenTerminates(t *testing.T) {
	// The cycle degrades past its grace while its run is running: the run
	// leaves Kargo's lookup first, and goes on.
	rec := started()
	rec.Phase, rec.DegradedSince = PhaseDegraded, ptr(minutes(4))
	obs := with(latchedView(), func(o *Observation) {
		o.Health = HealthUnhealthy
		o.Runs = []Run{ownRun(VerificationRunning)}
	})
	res := Step(verifying(), rec, obs, at(minutes(10)))
	if a, ok := res.Action(ActionCutShortRun); !ok || a.Run != cycleRun || res.Has(ActionTerminateRun) {
		t.Errorf("degraded failure: %v", kinds(res))
	}
	// Once cut short, the analysis is Aborted: no pass, no second failure.
	cut := ownRun(VerificationRunning)
	cut.CutShort, cut.CutShortAt = "the cycle it verifies failed (Degraded)", ptr(minutes(10))
	obs.Runs = []Run{cut}
	res = Step(verifying(), res.Record, obs, at(minutes(10)+time.Second))
	if a := res.Record.Analysis; a.Phase != VerificationAborted || a.Message != "cut short by kargo-latch: the cycle it verifies failed (Degraded)" {
		t.Errorf("analysis = %+v", a)
	}
	if res.Has(ActionTerminateRun) || res.Has(ActionCutShortRun) || res.RequeueAfter != 9*time.Second {
		t.Errorf("within the grace: %v, requeue %v (want 9s)", kinds(res), res.RequeueAfter)
	}
	// A grace later, Kargo does not follow it: terminated.
	res = Step(verifying(), res.Record, obs, at(minutes(10)+10*time.Second))
	if a, ok := res.Action(ActionTerminateRun); !ok || a.Run != cycleRun {
		t.Errorf("after the grace: %v", kinds(res))
	}
	// Told to terminate, then Successful, as Argo Rollouts ends it: still
	// no pass, nothing asked again.
	cut.Terminating, cut.Phase, cut.FinishedAt = true, VerificationSuccessful, ptr(minutes(11))
	obs.Runs = []Run{cut}
	again := Step(verifying(), res.Record, obs, at(minutes(12)))
	if len(again.Actions) != 0 || again.Record.Analysis.Phase != VerificationAborted {
		t.Errorf("ended: %v, %+v", kinds(again), again.Record.Analysis)
	}

	// A newer promotion supersedes the run: cut short, and none started
	// for the old Freight.
	obs = Observation{Stage: "test", HasVerification: true, LastPromotion: promo("p2", PromotionSucceeded, minutes(9)),
		FreightID: "F2", Freight: "f-p2", FreightNames: []string{"f-p2"}, Health: HealthProgressing, Runs: []Run{ownRun(VerificationRunning)}}
	res = Step(verifying(), started(), obs, at(minutes(10)))
	if a, ok := res.Action(ActionCutShortRun); !ok || a.Run != cycleRun {
		t.Errorf("superseded: %v", kinds(res))
	}
	if res.Has(ActionStartVerification) || res.Record.Analysis != nil {
		t.Errorf("the new cycle started at once: %v %+v", kinds(res), res.Record.Analysis)
	}
}

func TestVerifyOnLatchNeverPatchesARunKargoFollows(t *testing.T) {
	// Kargo adopted kargo-latch's run; the cycle then fails: Kargo is asked
	// to abort it, once, and the run is left alone.
	rec := started()
	rec.Phase, rec.DegradedSince = PhaseDegraded, ptr(minutes(4))
	obs := with(latchedView(), func(o *Observation) {
		o.Health = HealthUnhealthy
		o.Runs = []Run{ownRun(VerificationRunning)}
		o.Verification = &Verification{ID: "k1", Phase: VerificationRunning, Run: cycleRun}
	})
	res := Step(verifying(), rec, obs, at(minutes(10)))
	a, ok := res.Action(ActionAbortInKargo)
	if !ok || a.VerificationID != "k1" || res.Has(ActionCutShortRun) || res.Has(ActionTerminateRun) {
		t.Fatalf("actions %v (%+v)", kinds(res), a)
	}
	if res.Record.Analysis.AbortRequested != "k1" || !res.Record.Analysis.AdoptedByKargo {
		t.Errorf("analysis = %+v", res.Record.Analysis)
	}
	if again := Step(verifying(), res.Record, obs, at(minutes(11))); len(again.Actions) != 0 {
		t.Errorf("asked again: %v", kinds(again))
	}
	// The token already on the Stage (before a crash, or a person's): not
	// written again.
	if again := Step(verifying(), rec, with(obs, func(o *Observation) { o.AbortRequested = "k1" }), at(minutes(10))); again.Has(ActionAbortInKargo) {
		t.Errorf("token already there: %v", kinds(again))
	}
	// Kargo aborts: Failed, "Verification aborted by user"; the run ends
	// Successful. The analysis is Aborted, never a pass.
	obs.Verification = &Verification{ID: "k1", Phase: VerificationFailed, Message: UserAbortMessage, Run: cycleRun, Actor: "kubernetes:system:serviceaccount:kargo-latch:kargo-latch"}
	obs.Runs = []Run{withRun(ownRun(VerificationSuccessful), func(r *Run) { r.Terminating = true })}
	res = Step(verifying(), res.Record, obs, at(minutes(12)))
	if an := res.Record.Analysis; an.Phase != VerificationAborted || an.Message != "aborted in Kargo by kubernetes:system:serviceaccount:kargo-latch:kargo-latch" {
		t.Errorf("analysis = %+v", an)
	}
	// A superseded run Kargo adopted stays Kargo's.
	latchedRec := started()
	latchedRec.Analysis.AdoptedByKargo = true
	next := Observation{Stage: "test", HasVerification: true, LastPromotion: promo("p2", PromotionSucceeded, minutes(9)),
		FreightID: "F2", Freight: "f-p2", FreightNames: []string{"f-p2"}, Health: HealthProgressing, Runs: []Run{ownRun(VerificationRunning)}}
	res = Step(verifying(), latchedRec, next, at(minutes(10)))
	if res.Has(ActionCutShortRun) || res.Has(ActionTerminateRun) || !cmp.Equal(res.Record.KargosRuns, []string{cycleRun}) {
		t.Errorf("superseded adopted run: %v, kargosRuns %v", kinds(res), res.Record.KargosRuns)
	}
}

func TestVerifyOnLatchRunTerminatedBySomeoneElseIsNoPass(t *testing.T) {
	s := verifying()
	s.MarkVerified = true
	obs := with(latchedView(), func(o *Observation) {
		o.Runs = []Run{withRun(ownRun(VerificationSuccessful), func(r *Run) { r.Terminating, r.FinishedAt = true, ptr(minutes(5)) })}
		o.MayMark = true
	})
	res := Step(s, started(), obs, at(minutes(6)))
	if a := res.Record.Analysis; a.Phase != VerificationAborted {
		t.Errorf("analysis = %+v", a)
	}
	if res.Has(ActionMarkVerified) || res.Has(ActionFailed) || !res.Has(ActionCutShortRun) {
		t.Errorf("actions %v: want the run cut short, no mark, no failure", kinds(res))
	}
}

func TestVerifyOnLatchLeavesAReverifiedStageToKargo(t *testing.T) {
	obs := with(latchedView(), func(o *Observation) { o.Reverify = true })
	res := Step(verifying(), latched(), obs, at(minutes(3)))
	if diff := cmp.Diff([]ActionKind{ActionVerificationLeftToKargo}, kinds(res)); diff != "" {
		t.Fatalf("actions (-want +got):\n%s", diff)
	}
	if again := Step(verifying(), res.Record, obs, at(minutes(4))); len(again.Actions) != 0 {
		t.Errorf("said twice: %v", kinds(again))
	}
	// The token removed: kargo-latch starts the run.
	obs.Reverify = false
	if again := Step(verifying(), res.Record, obs, at(minutes(5))); !again.Has(ActionStartVerification) {
		t.Errorf("token removed: %v", kinds(again))
	}
	// Kargo started its own: followed.
	obs.Reverify, obs.Verification = true, &Verification{ID: "k2", Phase: VerificationRunning, Run: "test.kargos.f1"}
	if again := Step(verifying(), res.Record, obs, at(minutes(5))); again.Record.Analysis.ID != "k2" || again.Record.Analysis.Run != "test.kargos.f1" {
		t.Errorf("Kargo's run: %+v", again.Record.Analysis)
	}
}

func TestVerifyOnLatchDeletedRunStartsAgainOnce(t *testing.T) {
	obs := with(latchedView(), func(o *Observation) { o.RunGone = cycleRun })
	res := Step(verifying(), started(), obs, at(minutes(5)))
	second := RunName("test", "F1", "F1/p1", 2)
	if a, ok := res.Action(ActionStartVerification); !ok || a.Run != second || res.Record.Analysis.Attempt != 2 {
		t.Fatalf("first deletion: %v, %+v", kinds(res), res.Record.Analysis)
	}
	obs.RunGone = second
	res = Step(verifying(), res.Record, obs, at(minutes(6)))
	if res.Has(ActionStartVerification) || !res.Has(ActionVerificationRunDeleted) || res.Has(ActionFailed) {
		t.Errorf("second deletion: %v", kinds(res))
	}
	if res.Record.Analysis.Phase != VerificationAborted {
		t.Errorf("analysis = %+v", res.Record.Analysis)
	}
}

func TestVerifyOnLatchReportsARunNobodyPicksUp(t *testing.T) {
	obs := with(latchedView(), func(o *Observation) { o.Runs = []Run{ownRun("")} })
	res := Step(verifying(), started(), obs, at(minutes(4)))
	if res.Has(ActionVerificationNotPickedUp) || res.RequeueAfter != minutes(1) {
		t.Fatalf("before the timeout: %v, requeue %v", kinds(res), res.RequeueAfter)
	}
	res = Step(verifying(), started(), obs, at(minutes(5)))
	if !res.Has(ActionVerificationNotPickedUp) || res.Has(ActionFailed) || res.Has(ActionCreatePause) {
		t.Fatalf("at the timeout: %v", kinds(res))
	}
	if again := Step(verifying(), res.Record, obs, at(minutes(6))); again.Has(ActionVerificationNotPickedUp) {
		t.Error("reported twice")
	}
}

func TestVerifyOnLatchRefusedStartAsksNothing(t *testing.T) {
	obs := with(latchedView(), func(o *Observation) { o.StartRefused = true })
	res := Step(verifying(), latched(), obs, at(minutes(5)))
	if len(res.Actions) != 0 || res.Record.Analysis != nil || res.RequeueAfter != 0 {
		t.Errorf("refused: %v, %+v, requeue %v", kinds(res), res.Record.Analysis, res.RequeueAfter)
	}
}

func TestVerifyOnLatchYieldsToKargosOwnRun(t *testing.T) {
	// Kargo's lookup and kargo-latch's create crossed: Kargo's status
	// follows a run of its own. Kargo's decides; kargo-latch's run is
	// terminated, and no mark is made on its result.
	s := verifying()
	s.MarkVerified = true
	obs := with(latchedView(), func(o *Observation) {
		o.Runs = []Run{ownRun(VerificationRunning)}
		o.Verification = &Verification{ID: "k1", Phase: VerificationRunning, Run: "test.kargos.f1"}
		o.MayMark = true
	})
	res := Step(s, started(), obs, at(minutes(7)))
	if a := res.Record.Analysis; a.Actor != KargoActor || a.Run != "test.kargos.f1" {
		t.Errorf("analysis = %+v, want Kargo's", a)
	}
	if a, ok := res.Action(ActionCutShortRun); !ok || a.Run != cycleRun {
		t.Errorf("actions %v, want kargo-latch's run cut short", kinds(res))
	}
	if res.Has(ActionMarkVerified) || res.Has(ActionVerificationFinished) {
		t.Errorf("actions %v: marked on a run Kargo does not follow", kinds(res))
	}
}

func TestVerifyOnLatchUnknownRunPhaseIsNoResult(t *testing.T) {
	obs := with(latchedView(), func(o *Observation) { o.Runs = []Run{ownRun("Bogus")} })
	res := Step(verifying(), started(), obs, at(minutes(5)))
	if len(res.Actions) != 0 || res.Record.Analysis.Phase != "" || res.Record.Phase != PhaseLatched {
		t.Errorf("a garbage phase: %v, %+v", kinds(res), res.Record.Analysis)
	}
}

func TestVerifyOnLatchNeverTerminatesTheRunItAdopts(t *testing.T) {
	for name, rec := range map[string]Record{"after a crash": latched(), "recorded": started()} {
		obs := with(latchedView(), func(o *Observation) { o.Runs = []Run{ownRun(VerificationRunning)} })
		if res := Step(verifying(), rec, obs, at(minutes(4))); res.Has(ActionTerminateRun) || res.Has(ActionCutShortRun) {
			t.Errorf("%s: %v", name, kinds(res))
		}
	}
}

func withRun(r Run, edit func(*Run)) Run { edit(&r); return r }

func TestVerifyOnLatchTerminatesOnlyAfterTerminateAfter(t *testing.T) {
	s := verifying()
	s.VerifyGrace, s.TerminateAfter = 0, 30*time.Second
	rec := started()
	rec.Phase, rec.Failure = PhaseFailed, &Failure{Reason: ReasonDegraded, At: at(minutes(10))}
	cut := ownRun(VerificationRunning)
	cut.CutShort, cut.CutShortAt = "the cycle it verifies failed (Degraded)", ptr(minutes(10))
	obs := with(latchedView(), func(o *Observation) { o.Runs = []Run{cut} })
	if res := Step(s, rec, obs, at(minutes(10)+29*time.Second)); res.Has(ActionTerminateRun) || res.RequeueAfter != time.Second {
		t.Errorf("before TerminateAfter: %v, requeue %v", kinds(res), res.RequeueAfter)
	}
	if res := Step(s, rec, obs, at(minutes(10)+30*time.Second)); !res.Has(ActionTerminateRun) {
		t.Errorf("at TerminateAfter: %v", kinds(res))
	}
	// No readable time: never terminated (it ends on its own).
	obs.Runs[0].CutShortAt = nil
	if res := Step(s, rec, obs, at(minutes(60))); res.Has(ActionTerminateRun) {
		t.Errorf("no time: %v", kinds(res))
	}
}

func TestVerifyOnLatchAdoptedRunTerminatedBehindKargoIsNoPass(t *testing.T) {
	s := verifying()
	s.MarkVerified = true
	rec := started()
	rec.Analysis.AdoptedByKargo = true
	obs := with(latchedView(), func(o *Observation) {
		o.Runs = []Run{withRun(ownRun(VerificationSuccessful), func(r *Run) { r.Terminating = true })}
		o.Verification = &Verification{ID: "k1", Phase: VerificationSuccessful, Run: cycleRun}
		o.MayMark = true
	})
	res := Step(s, rec, obs, at(minutes(6)))
	if a := res.Record.Analysis; a.Phase != VerificationAborted {
		t.Errorf("analysis = %+v, want Aborted", a)
	}
	if a, ok := res.Action(ActionVerificationFinished); !ok || a.Phase != VerificationAborted {
		t.Errorf("finished = %+v (%v), want Aborted, never VerificationSucceeded", a, ok)
	}
}

// The cycle's own run, made before a crash whose record never named it, is
// not cut short while the cycle has not latched again: it is adopted then.
func TestVerifyOnLatchKeepsTheCyclesOwnUnrecordedRun(t *testing.T) {
	rec := latched()
	rec.Phase, rec.DegradedSince = PhaseDegraded, ptr(minutes(4))
	obs := with(latchedView(), func(o *Observation) { o.Health = HealthUnhealthy; o.Runs = []Run{ownRun(VerificationRunning)} })
	if res := Step(verifying(), rec, obs, at(minutes(5))); res.Has(ActionCutShortRun) || res.Has(ActionTerminateRun) {
		t.Errorf("the cycle's own run was cut short: %v", kinds(res))
	}
}
