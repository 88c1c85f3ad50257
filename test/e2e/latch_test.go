package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

var ctx = context.Background()

// promoteAndLatch plays a successful promotion followed by Progressing and
// Healthy, and waits for the latch.
func promoteAndLatch(t *testing.T, s *driver.Stage) latch.Record {
	t.Helper()
	r, err := playLatch(s)
	must(t, err)
	return r
}

// playLatch is promoteAndLatch returning its error, for code outside the
// test's goroutine.
func playLatch(s *driver.Stage) (latch.Record, error) {
	if _, err := s.StartPromotion(ctx); err != nil {
		return latch.Record{}, err
	}
	if _, err := s.FinishPromotion(ctx, "Succeeded"); err != nil {
		return latch.Record{}, err
	}
	if err := s.SetHealth(ctx, kargo.HealthProgressing, `Argo CD Application "app" in namespace "argocd" has health state "Progressing"`); err != nil {
		return latch.Record{}, err
	}
	if _, err := pollPhase(s, latch.PhasePromoted); err != nil {
		return latch.Record{}, err
	}
	if err := s.SetHealth(ctx, kargo.HealthHealthy); err != nil {
		return latch.Record{}, err
	}
	return pollPhase(s, latch.PhaseLatched)
}

func finishedAt(t *testing.T, s *driver.Stage) time.Time {
	t.Helper()
	u, err := s.Get(ctx)
	must(t, err)
	v, _, _ := unstructured.NestedString(u.Object, "status", "lastPromotion", "finishedAt")
	ts, err := time.Parse(time.RFC3339, v)
	must(t, err)
	return ts
}

func TestLatchIgnoresProgressingFlapsWithoutWriting(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	op := startOperator(t, ns, fastSettings())
	s := env.createStage(t, ns, "prod", nil)

	r := promoteAndLatch(t, s)
	v := r.Verification
	switch {
	case v == nil:
		t.Fatal("the latched record has no verification")
	case v.Phase != latch.VerificationSuccessful || v.Actor != "kargo-latch" || v.ID == "":
		t.Errorf("verification = %+v, want a Successful record by kargo-latch with an ID", v)
	case !v.StartTime.Equal(finishedAt(t, s)):
		t.Errorf("verification starts %v, want the promotion's finish %v", v.StartTime, finishedAt(t, s))
	case r.LatchedAt == nil || !v.FinishTime.Equal(*r.LatchedAt):
		t.Errorf("verification finishes %v, want the latch time %v", v.FinishTime, r.LatchedAt)
	}
	waitEvent(t, s, api.ReasonHealthLatched)

	patchesBefore := op.patches.Load()
	// The first flap is handled before the next: proof that the operator
	// saw a Progressing Stage, so that "no patch" below means something.
	op.processed(t, "the first flap", func() error { return s.SetHealth(ctx, kargo.HealthProgressing) })
	for i := 1; i < 19; i++ {
		h := kargo.HealthProgressing
		if i%2 == 1 {
			h = kargo.HealthHealthy
		}
		must(t, s.SetHealth(ctx, h))
		time.Sleep(30 * time.Millisecond) // the flaps' rhythm, not a wait: slow enough for the operator to see most of them
	}
	// The last flap, back to Healthy, once the operator has handled the
	// others: what it does with the flaps is done when it is idle after.
	op.processed(t, "the last flap", func() error { return s.SetHealth(ctx, kargo.HealthHealthy) })
	lastDriverRV := s.LastRV()
	// A loaded machine may merge the later flaps into one sync: only the
	// first, awaited, must be counted.
	if n := op.metric("kargo_latch_progressing_ignored_total"); n < 1 {
		t.Fatalf("%v ignored flaps counted, want at least the first", n)
	}

	if n := op.patches.Load() - patchesBefore; n != 0 {
		t.Errorf("the operator patched the Stage %d times during the flaps, want 0", n)
	}
	u, err := s.Get(ctx)
	must(t, err)
	if u.GetResourceVersion() != lastDriverRV {
		t.Errorf("Stage resourceVersion is %s after the flaps, want %s (the driver's last write): someone else wrote", u.GetResourceVersion(), lastDriverRV)
	}
	if got := stageRecord(t, s).Phase; got != latch.PhaseLatched {
		t.Errorf("phase after the flaps = %s, want Latched", got)
	}
	if n := env.eventCount(t, s, api.ReasonHealthLatched); n != 1 {
		t.Errorf("%d HealthLatched Events, want 1", n)
	}
	t.Logf("ignored flaps counted: %v of 10 turns to Progressing", op.metric("kargo_latch_progressing_ignored_total"))
}

func TestDegradedPastGraceFails(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	startOperator(t, ns, fastSettings())
	s := env.createStage(t, ns, "prod", map[string]string{api.DegradedGraceAnnotation: "2s"})
	promoteAndLatch(t, s)

	must(t, s.SetHealth(ctx, kargo.HealthUnhealthy, `Argo CD Application "app" in namespace "argocd" has health state "Degraded"`))
	degradedAt := time.Now()
	waitPhase(t, s, latch.PhaseDegraded)
	waitEvent(t, s, api.ReasonStageDegraded)
	// No further write from "Kargo": the grace must expire by itself.
	waitDegradedFailure(t, s, degradedAt, 2*time.Second)
	ev := waitEvent(t, s, api.ReasonLatchFailed)
	if ev.Type != "Warning" || !strings.Contains(ev.Message, "Degraded") {
		t.Errorf("LatchFailed Event = %s %q, want a Warning naming Degraded", ev.Type, ev.Message)
	}
}

func TestShortDegradationRecovers(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	op := startOperator(t, ns, fastSettings())
	s := env.createStage(t, ns, "prod", map[string]string{api.DegradedGraceAnnotation: "5s"})
	promoteAndLatch(t, s)

	must(t, s.SetHealth(ctx, kargo.HealthUnhealthy))
	waitPhase(t, s, latch.PhaseDegraded)
	must(t, s.SetHealth(ctx, kargo.HealthHealthy))
	r := waitPhase(t, s, latch.PhaseLatched)
	waitEvent(t, s, api.ReasonStageRecovered)
	if r.Failure != nil || r.DegradedSince != nil {
		t.Errorf("recovered record = %+v, want no failure and no degradedSince", r)
	}
	time.Sleep(5500 * time.Millisecond) // the scenario, not a wait: time passes beyond the grace the degradation had
	op.processed(t, "a nudge past the grace", nudge(s))
	if got := stageRecord(t, s).Phase; got != latch.PhaseLatched {
		t.Errorf("phase after the grace = %s, want Latched", got)
	}
	if n := env.eventCount(t, s, api.ReasonLatchFailed); n != 0 {
		t.Errorf("%d LatchFailed Events, want none", n)
	}
}

func TestNeverHealthyPastDeadlineFails(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	startOperator(t, ns, fastSettings())
	s := env.createStage(t, ns, "prod", map[string]string{api.LatchDeadlineAnnotation: "2s"})
	_, err := s.FinishPromotion(ctx, "Succeeded")
	must(t, err)
	must(t, s.SetHealth(ctx, kargo.HealthProgressing))
	waitPhase(t, s, latch.PhasePromoted)
	r := waitPhase(t, s, latch.PhaseFailed)
	if r.Failure.Reason != latch.ReasonLatchDeadlineExceeded {
		t.Errorf("failure reason = %s, want LatchDeadlineExceeded", r.Failure.Reason)
	}
	if r.Verification == nil || r.Verification.Phase != latch.VerificationFailed {
		t.Errorf("verification = %+v, want a Failed record", r.Verification)
	}
}

func TestVerificationFailureFails(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	startOperator(t, ns, fastSettings())
	stages := env.latchedStages(t, ns, "failing", "aborted", "erroring")
	failing, aborted, erroring := stages[0], stages[1], stages[2]

	_, err := failing.SetVerification(ctx, "Failed", "Metric \"error-rate\" assessed Failed")
	must(t, err)
	abortID, err := aborted.SetVerification(ctx, "Failed", latch.UserAbortMessage)
	must(t, err)
	_, err = erroring.SetVerification(ctx, "Error", "AnalysisRun could not be created")
	must(t, err)

	if r := waitPhase(t, failing, latch.PhaseFailed); r.Failure.Reason != latch.ReasonVerificationFailed {
		t.Errorf("failure reason = %s, want VerificationFailed", r.Failure.Reason)
	}
	if r := waitPhase(t, erroring, latch.PhaseFailed); r.Failure.Reason != latch.ReasonVerificationError {
		t.Errorf("failure reason = %s, want VerificationError", r.Failure.Reason)
	}
	// The record that shows the abort examined is the judgement of it.
	waitFor(t, "the aborted verification to be examined", func() bool {
		return stageRecord(t, aborted).ExaminedVerification == abortID
	})
	if r := stageRecord(t, aborted); r.Phase != latch.PhaseLatched || r.Failure != nil {
		t.Errorf("a user's abort gave phase %s, failure %+v; want Latched and none", r.Phase, r.Failure)
	}
}

func TestPromotionFailures(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	startOperator(t, ns, fastSettings())
	for phase, want := range map[string]latch.FailureReason{
		"Failed":  latch.ReasonPromotionFailed,
		"Errored": latch.ReasonPromotionErrored,
	} {
		s := env.createStage(t, ns, strings.ToLower(phase), nil)
		promoteAndLatch(t, s)
		_, err := s.StartPromotion(ctx)
		must(t, err)
		_, err = s.FinishPromotion(ctx, phase)
		must(t, err)
		if r := waitPhase(t, s, latch.PhaseFailed); r.Failure.Reason != want {
			t.Errorf("promotion %s: failure reason = %s, want %s", phase, r.Failure.Reason, want)
		}
	}
}

// An aborted Pending Promotion becomes Kargo's lastPromotion, and Kargo then
// reports Unknown by construction. The latch holds; and when an older
// Promotion's success moves freightHistory[0] while lastPromotion stays the
// aborted one, a new cycle starts.
func TestAbortedPromotionKeepsLatchAndReplayStartsCycle(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	op := startOperator(t, ns, fastSettings())
	s := env.createStage(t, ns, "prod", map[string]string{api.DegradedGraceAnnotation: "1s"})
	latched := promoteAndLatch(t, s)

	aborted, err := s.FinishPromotion(ctx, "Aborted")
	must(t, err)
	waitFor(t, "the aborted promotion to be examined", func() bool {
		return stageRecord(t, s).ExaminedPromotion == aborted
	})
	u, err := s.Get(ctx)
	must(t, err)
	if issues, _, _ := unstructured.NestedStringSlice(u.Object, "status", "health", "issues"); len(issues) != 1 || issues[0] != driver.IssueLastPromotionFailed {
		t.Fatalf("health issues = %q, want Kargo's %q", issues, driver.IssueLastPromotionFailed)
	}
	time.Sleep(2 * time.Second) // the scenario, not a wait: twice the degraded grace passes
	op.processed(t, "a nudge past the grace", nudge(s))
	r := stageRecord(t, s)
	if r.Phase != latch.PhaseLatched || r.DegradedSince != nil {
		t.Errorf("after an aborted promotion: phase %s, degradedSince %v; want Latched and no grace running", r.Phase, r.DegradedSince)
	}

	must(t, s.ReplayOlderSuccess(ctx))
	r = waitPhase(t, s, latch.PhasePromoted)
	if r.FreightID == latched.FreightID || r.FreightID == "" {
		t.Errorf("new cycle has freight ID %q, want the replayed Freight's, not %q", r.FreightID, latched.FreightID)
	}
	if r.Promotion != "" {
		t.Errorf("new cycle names promotion %q; Kargo reported none for the replayed Freight", r.Promotion)
	}
}

func TestRestartKeepsLatch(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	first := startOperator(t, ns, fastSettings())
	s := env.createStage(t, ns, "prod", nil)
	promoteAndLatch(t, s)
	waitEvent(t, s, api.ReasonHealthLatched)
	first.stop()

	must(t, s.SetHealth(ctx, kargo.HealthProgressing))
	second := startOperator(t, ns, fastSettings())
	waitFor(t, "the new operator to see the flap", func() bool {
		return second.metric("kargo_latch_progressing_ignored_total") == 1
	})
	second.processed(t, "a flap after the restart", func() error {
		if err := s.SetHealth(ctx, kargo.HealthHealthy); err != nil {
			return err
		}
		return s.SetHealth(ctx, kargo.HealthProgressing)
	})
	if got := stageRecord(t, s).Phase; got != latch.PhaseLatched {
		t.Errorf("phase after restart = %s, want Latched", got)
	}
	if n := second.patches.Load(); n != 0 {
		t.Errorf("the restarted operator patched the Stage %d times, want 0", n)
	}
	if n := env.eventCount(t, s, api.ReasonHealthLatched); n != 1 {
		t.Errorf("%d HealthLatched Events after restart, want 1", n)
	}
}

func TestBadInputIsReportedAndHarmless(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	op := startOperator(t, ns, latch.Settings{LatchDeadline: time.Minute, DegradedGrace: 2 * time.Second, PauseOnFailure: true})

	garbage := env.createStage(t, ns, "garbage", map[string]string{api.StateAnnotation: `{"phase":"Latched",`})
	soon := env.createStage(t, ns, "soon", map[string]string{api.LatchDeadlineAnnotation: "soon", api.PauseOnFailureAnnotation: "maybe"})
	purple := env.createStage(t, ns, "purple", nil)
	bare := env.createStage(t, ns, "bare", nil)
	healthy := env.createStage(t, ns, "healthy", nil)

	// Garbage record on a Stage whose promotion finished an hour's worth of
	// deadlines ago: a fresh start must not fail it.
	_, err := garbage.FinishPromotion(ctx, "Succeeded")
	must(t, err)
	must(t, garbage.SetHealth(ctx, kargo.HealthProgressing))
	_, err = soon.FinishPromotion(ctx, "Succeeded")
	must(t, err)
	promoteAndLatch(t, purple)
	must(t, purple.SetHealth(ctx, "Purple"))

	ev := waitEvent(t, garbage, api.ReasonInvalidState)
	if ev.Type != "Warning" {
		t.Errorf("InvalidState Event type = %s, want Warning", ev.Type)
	}
	if r := waitPhase(t, garbage, latch.PhasePromoted); r.Failure != nil {
		t.Errorf("garbage record led to failure %+v", r.Failure)
	}
	ev = waitEvent(t, soon, api.ReasonInvalidConfig)
	if !strings.Contains(ev.Message, "soon") || !strings.Contains(ev.Message, "maybe") {
		t.Errorf("InvalidConfig message %q does not name both bad values", ev.Message)
	}
	if r := waitPhase(t, soon, latch.PhasePromoted); r.Failure != nil {
		t.Errorf("invalid settings led to failure %+v", r.Failure)
	}
	ev = waitEvent(t, purple, api.ReasonUnknownHealth)
	if !strings.Contains(ev.Message, "Purple") {
		t.Errorf("UnknownHealth message %q does not name the value", ev.Message)
	}
	waitEvent(t, bare, api.ReasonStatusMissing)
	if r := waitPhase(t, bare, latch.PhaseIdle); r.Failure != nil {
		t.Errorf("a Stage without status got failure %+v", r.Failure)
	}

	// The operator keeps serving the others.
	promoteAndLatch(t, healthy)

	// Well past the 2s degraded grace, garbage health has not failed the
	// latched Stage.
	time.Sleep(2500 * time.Millisecond) // the scenario, not a wait: time passes beyond the grace
	op.processed(t, "a nudge of "+purple.Name+" past the grace", nudge(purple))
	if r := stageRecord(t, purple); r.Phase != latch.PhaseLatched {
		t.Errorf("health %q turned a latched Stage %s, want it held Latched", "Purple", r.Phase)
	}

	for _, c := range []struct {
		input string
		stage *driver.Stage
	}{{"state", garbage}, {"health", purple}, {"status", bare}} {
		if got := op.metric("kargo_latch_invalid_input_total", "stage", c.stage.Name, "input", c.input); got != 1 {
			t.Errorf("kargo_latch_invalid_input_total{input=%q} = %v, want 1", c.input, got)
		}
	}
	if got := op.metric("kargo_latch_invalid_config_total", "stage", "soon"); got != 1 {
		t.Errorf("kargo_latch_invalid_config_total = %v, want 1", got)
	}
}

// waitDegradedFailure waits for a degraded Stage to fail with reason
// Degraded, and checks that it did not fail before its grace.
func waitDegradedFailure(t *testing.T, s *driver.Stage, degradedAt time.Time, grace time.Duration) {
	t.Helper()
	r := waitPhase(t, s, latch.PhaseFailed)
	if r.Failure.Reason != latch.ReasonDegraded {
		t.Errorf("failure reason = %s, want Degraded", r.Failure.Reason)
	}
	if took := time.Since(degradedAt); took < grace {
		t.Errorf("failed %v after turning Unhealthy, before the %v grace", took, grace)
	}
}
