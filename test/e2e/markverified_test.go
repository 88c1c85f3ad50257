package e2e

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

var markVerified = map[string]string{api.MarkVerifiedAnnotation: "true"}

// TestMarkVerifiedWritesOneKey: when a cycle latches, the Freight gets
// status.verifiedIn.<stage>.verifiedAt = latchedAt through Kargo's real
// Freight CRD, and nothing else of it changes: not another Stage's
// verification, not an approval.
func TestMarkVerifiedWritesOneKey(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	op := startOperatorAs(t, env.marker, ns, fastSettings())
	s := env.createStage(t, ns, "test", markVerified, appsAB)
	upstream := env.createStage(t, ns, "upstream", nil)

	name := promote(t, s)
	must(t, upstream.MarkVerified(ctx, name, time.Now().Add(-time.Hour)))
	must(t, patchFreightStatus(ns, name, map[string]any{"approvedFor": map[string]any{
		"prod": map[string]any{"approvedAt": rfc3339(time.Now().Add(-30 * time.Minute))},
	}}))
	before := freightOnServer(t, ns, name)

	r := flapUntilLatched(t, s)
	at := waitVerified(t, s, name)
	if want := rfc3339(*r.LatchedAt); at != want {
		t.Errorf("verifiedAt = %s, want latchedAt %s", at, want)
	}
	after := freightOnServer(t, ns, name)
	want := before.DeepCopy()
	must(t, unstructured.SetNestedMap(want.Object, map[string]any{"verifiedAt": at}, "status", "verifiedIn", s.Name))
	delete(want.Object, "metadata")
	got := after.DeepCopy()
	delete(got.Object, "metadata")
	if diff := cmp.Diff(want.Object, got.Object); diff != "" {
		t.Errorf("the Freight changed beyond verifiedIn.%s (-want +got):\n%s", s.Name, diff)
	}
	byOperator := false
	for _, mf := range after.GetManagedFields() {
		byOperator = byOperator || (mf.Manager == api.FieldManager && mf.Subresource == "status")
	}
	if !byOperator {
		t.Errorf("no managedFields entry of %q on the status subresource: the mark was not the operator's", api.FieldManager)
	}

	// The record says so once the Event is made, after the Freight patch.
	waitFor(t, "the record to name the marked Freight", func() bool { return len(stageRecord(t, s).Marked) > 0 })
	if diff := cmp.Diff([]string{name}, stageRecord(t, s).Marked); diff != "" {
		t.Errorf("record's marked Freight (-want +got):\n%s", diff)
	}
	ev := waitEvent(t, s, api.ReasonFreightVerified)
	if ev.Type != "Normal" || !strings.Contains(ev.Message, name) || !strings.Contains(ev.Message, "every Application was Healthy") {
		t.Errorf("FreightVerified Event = %s %q, want a Normal Event naming %s and the Applications", ev.Type, ev.Message, name)
	}

	// Later passes of the same cycle, Progressing and Healthy again, write
	// nothing more.
	op.sees(t, "the Stage Healthy", func() error {
		return s.SetAppsHealth(ctx, "Healthy", app("a", "Healthy"), app("b", "Healthy"))
	})
	op.sees(t, "the Stage Progressing again", func() error {
		return s.SetAppsHealth(ctx, "Progressing", app("a", "Healthy"), app("b", "Progressing"))
	})
	if rv := freightOnServer(t, ns, name).GetResourceVersion(); rv != after.GetResourceVersion() {
		t.Errorf("the Freight was written again after its mark (resourceVersion %s -> %s)", after.GetResourceVersion(), rv)
	}
	assertMarks(t, op, s, 1)
	if n := op.metric("kargo_latch_mark_verified_errors_total"); n != 0 {
		t.Errorf("kargo_latch_mark_verified_errors_total = %v, want 0", n)
	}
}

// TestMarkVerifiedNotWhileDegradedOrFailed: a cycle that is Degraded or
// Failed when it could first be marked (here: when its pause is resumed) is
// not marked; a Degraded one is once it recovers, a Failed one never.
func TestMarkVerifiedNotWhileDegradedOrFailed(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	op := startOperatorAs(t, env.marker, ns, fastSettings())
	degraded := env.createStage(t, ns, "degraded", map[string]string{api.MarkVerifiedAnnotation: "true", api.DegradedGraceAnnotation: "1m"}, appsAB)
	failed := env.createStage(t, ns, "failed", map[string]string{api.MarkVerifiedAnnotation: "true", api.DegradedGraceAnnotation: "1s"}, appsAB)

	for _, c := range []struct {
		s    *driver.Stage
		want latch.Phase
	}{{degraded, latch.PhaseDegraded}, {failed, latch.PhaseFailed}} {
		hold := "hold-" + c.s.Name
		must(t, createPause(env.dev, pause(ns, hold, c.s.Name, "Manual")))
		waitFor(t, "the pause to cover "+c.s.Name, func() bool { return slices.Contains(stageRecord(t, c.s).Pauses, hold) })
		r, name := latchByApps(t, c.s)
		assertNotVerified(t, op, c.s, name, "latched while paused")
		must(t, c.s.SetAppsHealth(ctx, "Unhealthy", app("a", "Degraded"), app("b", "Healthy")))
		waitPhase(t, c.s, c.want)
		must(t, deletePause(env.lead, ns, hold))
		waitFor(t, "the resume of "+c.s.Name+" to be recorded", func() bool { return len(stageRecord(t, c.s).Pauses) == 0 })
		assertNotVerified(t, op, c.s, name, string(c.want)+" at the resume")

		op.sees(t, "the Apps of "+c.s.Name+" Healthy again", func() error {
			return c.s.SetAppsHealth(ctx, "Healthy", app("a", "Healthy"), app("b", "Healthy"))
		})
		if c.want == latch.PhaseFailed {
			if got := stageRecord(t, c.s).Phase; got != latch.PhaseFailed {
				t.Errorf("failed cycle became %s", got)
			}
			assertNotVerified(t, op, c.s, name, "Failed, then Healthy")
			continue
		}
		waitPhase(t, c.s, latch.PhaseLatched)
		if at := waitVerified(t, c.s, name); at != rfc3339(*r.LatchedAt) {
			t.Errorf("recovered cycle marked at %s, want its latchedAt %s", at, rfc3339(*r.LatchedAt))
		}
	}
}

// TestMarkVerifiedAfterResume: a person who stopped the line at a Stage
// also stops what flows out of it. A latched cycle is marked only once no
// pause covers the Stage: neither its own nor the project's big red button.
func TestMarkVerifiedAfterResume(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	op := startOperatorAs(t, env.marker, ns, fastSettings())
	s := env.createStage(t, ns, "test", markVerified, appsAB)
	must(t, createPause(env.dev, pause(ns, "hold-test", s.Name, "Manual")))
	must(t, createPause(env.dev, pause(ns, "hold-all", "*", "ProjectPause")))
	waitFor(t, "both pauses to cover the Stage", func() bool { return len(stageRecord(t, s).Pauses) == 2 })

	r, name := latchByApps(t, s)
	if got := slices.Sorted(slices.Values(r.Pauses)); !slices.Equal(got, []string{"hold-all", "hold-test"}) {
		t.Fatalf("latched record's pauses = %q, want both", got)
	}
	assertNotVerified(t, op, s, name, "latched while paused")

	must(t, deletePause(env.lead, ns, "hold-test"))
	waitFor(t, "one resume to be recorded", func() bool { return slices.Equal(stageRecord(t, s).Pauses, []string{"hold-all"}) })
	assertNotVerified(t, op, s, name, "still paused by the project's pause")

	must(t, deletePause(env.lead, ns, "hold-all"))
	if at := waitVerified(t, s, name); at != rfc3339(*r.LatchedAt) {
		t.Errorf("marked after the resume at %s, want latchedAt %s", at, rfc3339(*r.LatchedAt))
	}
	// The Event follows the mark, sent on its own; once it is there and the
	// operator idle, a second one would be there too.
	waitEvent(t, s, api.ReasonFreightVerified)
	op.idle(t)
	if n := env.eventCount(t, s, api.ReasonFreightVerified); n != 1 {
		t.Errorf("%d FreightVerified Events, want 1", n)
	}
}

// TestMarkVerifiedWaitsForVerification: kargo-latch never replaces a
// configured verification. A Stage with spec.verification is marked only
// once its current verification is Successful; an aborted one is no
// failure, but no success either; a failed or errored one fails the cycle.
func TestMarkVerifiedWaitsForVerification(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	op := startOperatorAs(t, env.marker, ns, fastSettings())
	stage := func(name string) *driver.Stage {
		s, err := env.kargo.CreateStage(ctx, ns, name, markVerified, driver.WithVerification(), appsAB)
		must(t, err)
		return s
	}

	gated := stage("gated")
	r, name := latchByApps(t, gated)
	assertNotVerified(t, op, gated, name, "latched before any verification")
	for _, v := range []struct{ phase, message string }{
		{"Pending", ""},
		{"Running", ""},
		{"Inconclusive", "Metric \"error-rate\" assessed Inconclusive"},
		{"Failed", latch.UserAbortMessage},
	} {
		op.sees(t, "verification "+v.phase, func() error {
			_, err := gated.SetVerification(ctx, v.phase, v.message)
			return err
		})
		if got := stageRecord(t, gated).Phase; got != latch.PhaseLatched {
			t.Errorf("verification %s %q: phase %s, want Latched", v.phase, v.message, got)
		}
		assertNotVerified(t, op, gated, name, "verification "+v.phase+" "+v.message)
	}
	_, err := gated.SetVerification(ctx, "Successful", "")
	must(t, err)
	if at := waitVerified(t, gated, name); at != rfc3339(*r.LatchedAt) {
		t.Errorf("marked after the verification at %s, want latchedAt %s", at, rfc3339(*r.LatchedAt))
	}

	for phase, reason := range map[string]latch.FailureReason{"Failed": latch.ReasonVerificationFailed, "Error": latch.ReasonVerificationError} {
		s := stage("verification-" + strings.ToLower(phase))
		_, name := latchByApps(t, s)
		_, err := s.SetVerification(ctx, phase, "AnalysisRun "+phase)
		must(t, err)
		if r := waitPhase(t, s, latch.PhaseFailed); r.Failure.Reason != reason {
			t.Errorf("verification %s: failure %s, want %s", phase, r.Failure.Reason, reason)
		}
		assertNotVerified(t, op, s, name, "verification "+phase)
		// A later success does not undo the cycle's failure.
		op.sees(t, "a later successful verification", func() error {
			_, err := s.SetVerification(ctx, "Successful", "")
			return err
		})
		assertNotVerified(t, op, s, name, "verification "+phase+", then Successful")
	}
}

// TestMarkVerifiedLeavesVerifiedFreight: a Freight Kargo already verified in
// the Stage is left as it is: no write, no Event, no count; the record
// still says the cycle's Freight is verified.
func TestMarkVerifiedLeavesVerifiedFreight(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	op := startOperatorAs(t, env.marker, ns, fastSettings())
	s := env.createStage(t, ns, "test", markVerified, appsAB)
	name := promote(t, s)
	kargoAt := time.Now().Add(-time.Minute)
	must(t, s.MarkVerified(ctx, name, kargoAt))
	before := freightOnServer(t, ns, name)

	flapUntilLatched(t, s)
	waitFor(t, "the record to name the verified Freight", func() bool { return slices.Contains(stageRecord(t, s).Marked, name) })
	after := freightOnServer(t, ns, name)
	if after.GetResourceVersion() != before.GetResourceVersion() {
		t.Errorf("the verified Freight was written (resourceVersion %s -> %s)", before.GetResourceVersion(), after.GetResourceVersion())
	}
	if at, _ := verifiedAt(after, s.Name); at != rfc3339(kargoAt) {
		t.Errorf("verifiedAt = %s, want Kargo's %s", at, rfc3339(kargoAt))
	}
	assertMarks(t, op, s, 0)
}

// TestMarkVerifiedOff: without the annotation and the flag, or with the
// annotation "false" over the flag, nothing is marked; the flag alone
// marks.
func TestMarkVerifiedOff(t *testing.T) {
	t.Parallel()
	off := env.newProject(t)
	opOff := startOperatorAs(t, env.marker, off, fastSettings())
	plain := env.createStage(t, off, "plain", nil, appsAB)

	on := env.newProject(t)
	flagOn := fastSettings()
	flagOn.MarkVerified = true
	opOn := startOperatorAs(t, env.marker, on, flagOn)
	optedOut := env.createStage(t, on, "opted-out", map[string]string{api.MarkVerifiedAnnotation: "false"}, appsAB)
	byFlag := env.createStage(t, on, "by-flag", nil, appsAB)

	// The mark would be made before the latched record is stored: a stored
	// record without it is the proof.
	for _, c := range []struct {
		op *operator
		s  *driver.Stage
	}{{opOff, plain}, {opOn, optedOut}} {
		r, name := latchByApps(t, c.s)
		if len(r.Marked) != 0 {
			t.Errorf("%s: record names marked Freight %q with mark-verified off", c.s.Name, r.Marked)
		}
		assertNotVerified(t, c.op, c.s, name, "mark-verified off")
	}
	r, name := latchByApps(t, byFlag)
	if at := waitVerified(t, byFlag, name); at != rfc3339(*r.LatchedAt) {
		t.Errorf("marked by the flag at %s, want latchedAt %s", at, rfc3339(*r.LatchedAt))
	}
}

// TestMarkVerifiedForbiddenWithoutTheRight: mark-verified on, the operator
// without the mark-verified component (the default install's identity). One
// MarkVerifiedForbidden Warning per cycle however often the operator tries
// again (every minute), the error counter, and the latch, failures and
// pauses carry on as usual. Two Stages share the minute the retry takes:
// "steady" stays in its cycle across the retry, "test" is in a new cycle
// when it comes.
func TestMarkVerifiedForbiddenWithoutTheRight(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	settings := fastSettings()
	settings.PauseOnFailure = true
	op := startOperator(t, ns, settings)
	annotations := map[string]string{api.MarkVerifiedAnnotation: "true", api.DegradedGraceAnnotation: "1s"}
	steady := env.createStage(t, ns, "steady", annotations, appsAB)
	s := env.createStage(t, ns, "test", annotations, appsAB)
	refusals := func(s *driver.Stage) float64 {
		return op.metric("kargo_latch_mark_verified_errors_total", "project", ns, "stage", s.Name)
	}

	_, steadyFreight := latchByApps(t, steady)
	refusedAt := time.Now()
	r, first := latchByApps(t, s)
	if r.LatchedBy != latch.LatchedByApps || len(r.Marked) != 0 {
		t.Errorf("latched record: latchedBy %q, marked %q; want Applications and none", r.LatchedBy, r.Marked)
	}
	for _, stage := range []*driver.Stage{steady, s} {
		if ev := waitEvent(t, stage, api.ReasonMarkVerifiedForbidden); ev.Type != "Warning" {
			t.Errorf("%s: MarkVerifiedForbidden Event type = %s, want Warning", stage.Name, ev.Type)
		}
		if n := refusals(stage); n != 1 {
			t.Errorf("%s: kargo_latch_mark_verified_errors_total = %v, want 1", stage.Name, n)
		}
	}
	assertNotVerified(t, op, s, first, "without the right")

	// The rest of the cycle as usual: flaps are ignored, a person's pause
	// and resume work, a degradation fails and pauses.
	op.sees(t, "the Stage Healthy", func() error {
		return s.SetAppsHealth(ctx, "Healthy", app("a", "Healthy"), app("b", "Healthy"))
	})
	op.sees(t, "the Stage Progressing again", func() error {
		return s.SetAppsHealth(ctx, "Progressing", app("a", "Healthy"), app("b", "Progressing"))
	})
	if got := stageRecord(t, s).Phase; got != latch.PhaseLatched {
		t.Errorf("after a flap: phase %s, want Latched", got)
	}
	must(t, createPause(env.dev, pause(ns, "hold", s.Name, "Manual")))
	waitPaused(t, s, true)
	must(t, deletePause(env.lead, ns, "hold"))
	waitPaused(t, s, false)
	must(t, s.SetHealth(ctx, "Unhealthy"))
	failed := waitPhase(t, s, latch.PhaseFailed)
	waitPaused(t, s, true)
	if failed.Failure.Reason != latch.ReasonDegraded || failed.Failure.Pause == "" {
		t.Errorf("failure %+v, want Degraded with a pause", failed.Failure)
	}
	must(t, deletePause(env.lead, ns, failed.Failure.Pause))
	waitPaused(t, s, false)
	r, second := latchByApps(t, s)
	if r.Phase != latch.PhaseLatched {
		t.Errorf("second cycle: phase %s, want Latched", r.Phase)
	}

	// The retry, a minute after the refusals: a new cycle is warned about
	// again, the same one is not.
	untilRetry := time.Until(refusedAt.Add(time.Minute + waitLimit))
	waitLong(t, "the retry on "+steady.Name, untilRetry, func() bool { return refusals(steady) >= 2 })
	waitLong(t, "the second cycle's MarkVerifiedForbidden", untilRetry, func() bool {
		return env.eventCount(t, s, api.ReasonMarkVerifiedForbidden) == 2
	})
	// The retries are counted in the syncs that would warn again; once the
	// operator is idle, those syncs are over.
	op.idle(t)
	if n := env.eventCount(t, steady, api.ReasonMarkVerifiedForbidden); n != 1 {
		t.Errorf("%s: %d MarkVerifiedForbidden Events in one cycle refused %v times, want 1", steady.Name, n, refusals(steady))
	}
	if n := env.eventCount(t, s, api.ReasonMarkVerifiedForbidden); n != 2 {
		t.Errorf("%s: %d MarkVerifiedForbidden Events for two cycles, want 2", s.Name, n)
	}
	if n := refusals(s); n < 2 {
		t.Errorf("%s: kargo_latch_mark_verified_errors_total = %v after two refused cycles, want at least 2", s.Name, n)
	}
	assertNotVerified(t, op, steady, steadyFreight, "retried without the right")
	assertNotVerified(t, op, s, second, "second cycle without the right")
	for _, stage := range []*driver.Stage{steady, s} {
		if got := stageRecord(t, stage).Phase; got != latch.PhaseLatched {
			t.Errorf("%s after the refused retry: phase %s, want Latched", stage.Name, got)
		}
	}
	select {
	case <-op.done:
		t.Error("the operator stopped")
	default:
	}
}

// TestMarkVerifiedExactlyOnceAcrossKills kills the real operator with
// SIGKILL at random moments while 20 cycles latch and mark their Freight,
// half per Application, half on the Stage's health. Every cycle's Freight
// must end verified in its Stage (no lost mark), its mark must never change
// once written, and each mark must have exactly one FreightVerified Event.
func TestMarkVerifiedExactlyOnceAcrossKills(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	op := newMeteredProcess(t, env.marker, "--namespace", ns, "--mark-verified", "--latch-deadline", "1m",
		"--health-probe-bind-address", "0", "-v", "2")
	op.start()
	marks := watchMarks(t, ns)

	const stageCount, cyclesPerStage = 4, 5
	stages := make([]*driver.Stage, stageCount)
	for i := range stages {
		stages[i] = env.createStage(t, ns, fmt.Sprintf("s%d", i), nil, appsAB)
	}
	cycles := make([][]markedCycle, stageCount)
	errs := make([]error, stageCount)
	var wg sync.WaitGroup
	for i, s := range stages {
		wg.Go(func() {
			for k := range cyclesPerStage {
				c, err := runMarkCycle(s, k%2 == 0)
				if err != nil {
					errs[i] = fmt.Errorf("%s, cycle %d: %w", s.Name, k+1, err)
					return
				}
				cycles[i] = append(cycles[i], c)
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	// Kills come often, so that some land inside a mark: a restarted
	// operator needs about 100 ms to list and watch before it acts again.
	kills, began := 0, time.Now()
	for running := true; running; {
		select {
		case <-done:
			running = false
		case <-time.After(time.Duration(50+rand.IntN(300)) * time.Millisecond): //nolint:gosec // test jitter, not security
			op.kill()
			kills++
			op.start()
		}
	}
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// A last restart must not mark again: once it has caught up, it has
	// judged every Stage.
	op.kill()
	op.start()
	op.caughtUp(t)
	t.Logf("the operator was killed %d times during %d marking cycles (%v)", kills, stageCount*cyclesPerStage, time.Since(began).Round(time.Millisecond))

	for i, s := range stages {
		events := env.stageEvents(t, s)[api.ReasonFreightVerified]
		if n := env.eventCount(t, s, api.ReasonFreightVerified); n != cyclesPerStage {
			t.Errorf("%s: %d FreightVerified Events for %d marks", s.Name, n, cyclesPerStage)
		}
		for _, c := range cycles[i] {
			f := freightOnServer(t, ns, c.freight)
			at, ok := verifiedAt(f, s.Name)
			switch {
			case !ok:
				t.Errorf("%s: Freight %s is not verified: a lost mark", s.Name, c.freight)
				continue
			case len(verifiedIn(f)) != 1:
				t.Errorf("%s: Freight %s is verified in %v, want only %s", s.Name, c.freight, verifiedIn(f), s.Name)
			}
			if got := marks.values(c.freight, s.Name); len(got) != 1 {
				t.Errorf("%s: the mark of Freight %s took the values %q, want one", s.Name, c.freight, got)
			}
			naming := 0
			for _, ev := range events {
				if strings.Contains(ev.Message, c.freight) {
					naming++
					if !strings.Contains(ev.Message, " at "+at+":") {
						t.Errorf("%s: the FreightVerified Event for %s states another time than the mark's %s: %q", s.Name, c.freight, at, ev.Message)
					}
				}
			}
			if naming != 1 {
				t.Errorf("%s: %d FreightVerified Events name Freight %s, want 1", s.Name, naming, c.freight)
			}
			// The latch is stored before the mark: whatever a kill
			// interrupted, verifiedAt is the stored latchedAt.
			if latched := rfc3339(c.latchedAt); at != latched {
				t.Errorf("%s: Freight %s verified at %s, but the cycle latched at %s", s.Name, c.freight, at, latched)
			}
		}
	}
}

// TestMarkVerifiedLeavesKargosMarkOfTheSameSecond: Kargo verified the
// Freight in the very second the cycle latched, so its verifiedAt is the
// one kargo-latch would write. The API server's managedFields say whose it
// is: no write, no FreightVerified Event, no count; the record says the
// Freight is verified.
func TestMarkVerifiedLeavesKargosMarkOfTheSameSecond(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	op := startOperatorAs(t, env.marker, ns, fastSettings())
	s := env.createStage(t, ns, "test", markVerified, appsAB)
	// Paused, the latch is not marked until the resume: Kargo marks first.
	must(t, createPause(env.dev, pause(ns, "hold", s.Name, "Manual")))
	waitFor(t, "the pause to cover the Stage", func() bool { return slices.Contains(stageRecord(t, s).Pauses, "hold") })
	r, name := latchByApps(t, s)
	assertNotVerified(t, op, s, name, "latched while paused")
	must(t, s.MarkVerified(ctx, name, *r.LatchedAt))
	before := freightOnServer(t, ns, name)

	must(t, deletePause(env.lead, ns, "hold"))
	waitFor(t, "the record to name the verified Freight", func() bool { return slices.Contains(stageRecord(t, s).Marked, name) })
	op.idle(t)
	if after := freightOnServer(t, ns, name); after.GetResourceVersion() != before.GetResourceVersion() {
		t.Errorf("the verified Freight was written (resourceVersion %s -> %s)", before.GetResourceVersion(), after.GetResourceVersion())
	}
	assertMarks(t, op, s, 0)
}
