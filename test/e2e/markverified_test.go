package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

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
