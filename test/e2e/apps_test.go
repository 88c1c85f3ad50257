package e2e

import (
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// TestAppsFlappingOutOfPhaseLatchPerApp plays what kargo-api-facts.md §7.10
// saw with Kargo's real controller: two Applications, each Healthy 3 s out
// of 7 but never together, so that the Stage is Progressing throughout. The
// cycle latches once the second App has been Healthy, at that moment, and
// 30 s of further flapping write nothing.
func TestAppsFlappingOutOfPhaseLatchPerApp(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	op := startOperator(t, ns, fastSettings())
	s := env.createStage(t, ns, "test", nil, appsAB)

	promote(t, s)
	must(t, s.SetAppsHealth(ctx, kargo.HealthProgressing, app("a", "Progressing"), app("b", "Progressing")))
	waitPhase(t, s, latch.PhasePromoted)
	must(t, s.SetAppsHealth(ctx, kargo.HealthProgressing, app("a", "Healthy"), app("b", "Progressing")))
	var r latch.Record
	waitFor(t, "App a to count as Healthy", func() bool {
		r = stageRecord(t, s)
		_, seen := r.AppsHealthy["argocd/a"]
		return seen
	})
	if r.Phase != latch.PhasePromoted {
		t.Fatalf("one App of two Healthy: phase %s, want Promoted", r.Phase)
	}
	bHealthy := time.Now()
	must(t, s.SetAppsHealth(ctx, kargo.HealthProgressing, app("a", "Progressing"), app("b", "Healthy")))
	r = waitPhase(t, s, latch.PhaseLatched)
	seenLatched := time.Now()

	if r.LatchedBy != latch.LatchedByApps {
		t.Errorf("latchedBy = %q, want %q", r.LatchedBy, latch.LatchedByApps)
	}
	if got := slices.Sorted(maps.Keys(r.AppsHealthy)); !slices.Equal(got, []string{"argocd/a", "argocd/b"}) {
		t.Errorf("appsHealthy lists %q, want argocd/a and argocd/b", got)
	}
	a, b := r.AppsHealthy["argocd/a"], r.AppsHealthy["argocd/b"]
	switch {
	case r.LatchedAt == nil:
		t.Fatal("latched record has no latchedAt")
	case !a.Before(bHealthy):
		t.Errorf("App a counted at %v, not before b turned Healthy at %v", a, bHealthy)
	case b.Before(bHealthy) || b.After(seenLatched):
		t.Errorf("App b counted at %v, want between its turn to Healthy %v and the latch being seen %v", b, bHealthy, seenLatched)
	case !r.LatchedAt.Equal(b):
		t.Errorf("latchedAt = %v, want the moment the last App was Healthy, %v", r.LatchedAt, b)
	}
	ev := waitEvent(t, s, api.ReasonHealthLatched)
	if !strings.Contains(ev.Message, "Application") {
		t.Errorf("HealthLatched message %q does not say the Applications latched it", ev.Message)
	}

	// The echo of the latch's own record write may reach the operator late
	// on a loaded machine. Its watch delivers in order, so once it has
	// synced after two later writes, the echo is behind it.
	op.sees(t, "the Stage Healthy as a whole", func() error {
		return s.SetAppsHealth(ctx, kargo.HealthHealthy, app("a", "Healthy"), app("b", "Healthy"))
	})
	op.sees(t, "the Stage Progressing again", func() error {
		return s.SetAppsHealth(ctx, kargo.HealthProgressing, app("a", "Healthy"), app("b", "Progressing"))
	})
	op.idle(t)

	// 30 s of flapping, each App Healthy 3 s of every 7, out of phase, the
	// Stage Progressing throughout.
	patchesBefore := op.patches.Load()
	syncsBefore := op.metric("kargo_latch_reconcile_duration_seconds")
	writes := 0
	last := ""
	for k := range 60 {
		aHealthy, bHealthy := k%14 < 6, (k+7)%14 < 6
		state := map[bool]string{true: "Healthy", false: "Progressing"}
		if now := state[aHealthy] + state[bHealthy]; now != last {
			must(t, s.SetAppsHealth(ctx, kargo.HealthProgressing, app("a", state[aHealthy]), app("b", state[bHealthy])))
			last = now
			writes++
		}
		time.Sleep(500 * time.Millisecond) // the flapping's own rhythm
	}
	lastFlapRV := s.LastRV()
	// docs/latch.md promises more than no writes: after the latch the mirror
	// drops per-App health, so App-only flaps do not even wake the operator.
	if n := op.metric("kargo_latch_reconcile_duration_seconds") - syncsBefore; n != 0 {
		t.Errorf("the operator synced the Stage %v times for App-only flaps after the latch, want 0", n)
	}
	// Proof that the operator watched throughout: after the last flap, the
	// Stage is Healthy a moment and Progressing again, which the operator
	// counts as an ignored flap (it writes nothing for it either). Its watch
	// delivers in order, so it has seen every App flap before.
	ignoredBefore := op.metric("kargo_latch_progressing_ignored_total")
	// The operator counts a return to Progressing from the health it last
	// saw: it must have handled the Healthy moment before the next write, or
	// one sync under load takes both in and sees no return.
	op.processed(t, "the Stage Healthy a moment", func() error {
		return s.SetAppsHealth(ctx, kargo.HealthHealthy, app("a", "Healthy"), app("b", "Healthy"))
	})
	must(t, s.SetAppsHealth(ctx, kargo.HealthProgressing, app("a", "Progressing"), app("b", "Healthy")))
	waitFor(t, "the operator to ignore the Stage's return to Progressing", func() bool {
		return op.metric("kargo_latch_progressing_ignored_total") > ignoredBefore
	})
	op.idle(t)

	if n := op.patches.Load() - patchesBefore; n != 0 {
		t.Errorf("the operator patched the Stage %d times during 30 s of flapping, want 0", n)
	}
	u, err := s.Get(ctx)
	must(t, err)
	if u.GetResourceVersion() != s.LastRV() {
		t.Errorf("Stage resourceVersion is %s after the flaps, want %s (the driver's last write; the last flap was %s)", u.GetResourceVersion(), s.LastRV(), lastFlapRV)
	}
	if diff := cmp.Diff(r, stageRecord(t, s)); diff != "" {
		t.Errorf("the record changed during the flaps (-latched +after):\n%s", diff)
	}
	if n := env.eventCount(t, s, api.ReasonHealthLatched); n != 1 {
		t.Errorf("%d HealthLatched Events, want 1", n)
	}
	t.Logf("%d App flaps over 30 s, no write", writes)
}

// TestAppsHealthyUnderUnhealthyStageDoNotCount: Kargo's aggregate Unhealthy
// (e.g. a wrong revision) means something is wrong that an App's own status
// may not show, so an App Healthy and Synced in that observation has not
// been Healthy in this cycle.
func TestAppsHealthyUnderUnhealthyStageDoNotCount(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	op := startOperator(t, ns, fastSettings())
	s := env.createStage(t, ns, "test", nil, appsAB)
	promote(t, s)
	waitPhase(t, s, latch.PhasePromoted)

	for _, aggregate := range []string{kargo.HealthUnhealthy, kargo.HealthUnknown} {
		op.sees(t, "both Apps Healthy under a Stage "+aggregate, func() error {
			return s.SetAppsHealth(ctx, aggregate, app("a", "Healthy"), app("b", "Healthy"))
		})
		if r := stageRecord(t, s); r.Phase != latch.PhasePromoted || len(r.AppsHealthy) != 0 {
			t.Errorf("after Apps Healthy under a Stage %s: phase %s, appsHealthy %v; want Promoted and none", aggregate, r.Phase, r.AppsHealthy)
		}
	}
	// Had b counted above, a's turn would complete the set and latch.
	must(t, s.SetAppsHealth(ctx, kargo.HealthProgressing, app("a", "Healthy"), app("b", "Progressing")))
	var r latch.Record
	waitFor(t, "App a to count as Healthy", func() bool {
		r = stageRecord(t, s)
		_, seen := r.AppsHealthy["argocd/a"]
		return seen
	})
	if _, seen := r.AppsHealthy["argocd/b"]; seen || r.Phase != latch.PhasePromoted {
		t.Errorf("phase %s, appsHealthy %v; want Promoted with App a only", r.Phase, r.AppsHealthy)
	}
	// Out of sync is not Healthy either.
	op.sees(t, "App b Healthy but OutOfSync", func() error {
		return s.SetAppsHealth(ctx, kargo.HealthProgressing, app("a", "Progressing"), driver.App{Name: "b", Health: "Healthy", Sync: "OutOfSync"})
	})
	if r := stageRecord(t, s); r.Phase != latch.PhasePromoted {
		t.Errorf("App b Healthy but OutOfSync latched the Stage (%s, %v)", r.Phase, r.AppsHealthy)
	}
}

// TestAppsDegradedAfterLatchFails: after a per-App latch, an App Degraded
// (Kargo's aggregate Unhealthy) degrades the Stage, fails it past the grace
// and, with pause-on-failure, pauses it.
func TestAppsDegradedAfterLatchFails(t *testing.T) {
	t.Parallel()
	_, s, degradedAt := degradedAfterAppsLatch(t, "2s")
	ns := s.Namespace
	waitEvent(t, s, api.ReasonStageDegraded)
	waitDegradedFailure(t, s, degradedAt, 2*time.Second)
	waitPaused(t, s, true)
	if got := pausesFor(t, ns, s.Name); got != 1 {
		t.Errorf("%d StagePauses, want 1", got)
	}
	if r := stageRecord(t, s); r.Failure.Pause == "" || !slices.Equal(r.Pauses, []string{r.Failure.Pause}) {
		t.Errorf("record pauses %q, failure pause %q; want the failure's pause", r.Pauses, r.Failure.Pause)
	}
	waitEvent(t, s, api.ReasonStagePaused)
}

// TestAppsUnknownOutputShapeUsesAggregateOnly: a health output of another
// shape (another health checker, a future Kargo), or none, means no per-App
// data: the Stage latches on its aggregate Healthy alone, with no Warning
// and no failure. Each shape here would look like "every App Healthy" to a
// reader that took what it could from it.
func TestAppsUnknownOutputShapeUsesAggregateOnly(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	op := startOperator(t, ns, fastSettings())
	healthyApp := map[string]any{"Name": "a", "Namespace": "argocd", "health": map[string]any{"status": "Healthy"}, "sync": map[string]any{"status": "Synced"}}
	shapes := []struct {
		name   string
		output any // nil: no output at all
	}{
		{"none", nil},
		{"empty", []any{}},
		{"no-apps", []any{map[string]any{"applicationStatuses": []any{}}}},
		{"other-checker", []any{map[string]any{"checks": []any{map[string]any{"name": "smoke", "status": "Healthy"}}}}},
		{"beside-other-checker", []any{map[string]any{"applicationStatuses": []any{healthyApp}}, map[string]any{"ready": true}}},
		{"not-a-list", map[string]any{"applicationStatuses": []any{healthyApp}}},
		{"scalar-entries", []any{map[string]any{"applicationStatuses": []any{"a", "b"}}}},
		{"nameless-entries", []any{map[string]any{"applicationStatuses": []any{map[string]any{"health": map[string]any{"status": "Healthy"}, "sync": map[string]any{"status": "Synced"}}}}}},
		{"scalar", "Healthy"},
	}
	health := func(aggregate string, output any) map[string]any {
		h := map[string]any{"status": aggregate}
		if output != nil {
			h["output"] = output
		}
		return h
	}
	for _, shape := range shapes {
		s := env.createStage(t, ns, shape.name, nil)
		promote(t, s)
		waitPhase(t, s, latch.PhasePromoted)
		op.sees(t, "a Progressing Stage with output "+shape.name, func() error {
			return patchStageStatus(s, map[string]any{"health": health(kargo.HealthProgressing, shape.output)})
		})
		if r := stageRecord(t, s); r.Phase != latch.PhasePromoted || len(r.AppsHealthy) != 0 {
			t.Errorf("%s: Progressing Stage: phase %s, appsHealthy %v; want Promoted and none", shape.name, r.Phase, r.AppsHealthy)
		}
		must(t, patchStageStatus(s, map[string]any{"health": health(kargo.HealthHealthy, shape.output)}))
		if r := waitPhase(t, s, latch.PhaseLatched); r.LatchedBy != latch.LatchedByStage {
			t.Errorf("%s: latchedBy = %q, want %q", shape.name, r.LatchedBy, latch.LatchedByStage)
		}
		// After the latch the same output with a Progressing Stage holds it.
		op.sees(t, "a Progressing latched Stage with output "+shape.name, func() error {
			return patchStageStatus(s, map[string]any{"health": health(kargo.HealthProgressing, shape.output)})
		})
		if r := stageRecord(t, s); r.Phase != latch.PhaseLatched || r.Failure != nil {
			t.Errorf("%s: after the latch: phase %s, failure %+v; want Latched", shape.name, r.Phase, r.Failure)
		}
		// StatusMissing is not about the output: on a busy machine the
		// driver's first status write may come more than the operator's 1 s
		// StatusMissingAfter after the Stage's creation.
		for reason, evs := range env.stageEvents(t, s) {
			for _, ev := range evs {
				if ev.Type == "Warning" && reason != api.ReasonStatusMissing {
					t.Errorf("%s: Warning Event %s: %s", shape.name, ev.Reason, ev.Message)
				}
			}
		}
		for _, input := range []string{"health", "apps"} {
			if n := op.metric("kargo_latch_invalid_input_total", "stage", s.Name, "input", input); n != 0 {
				t.Errorf("%s: kargo_latch_invalid_input_total{input=%q} = %v, want 0", shape.name, input, n)
			}
		}
	}
}

// A Stage latched by its Apps recovers from a Degraded blip once every App
// was Healthy again, each at its own moment, although the Stage is never
// Healthy as a whole; it is not failed at the end of the grace.
func TestAppsRecoverPerAppAfterADegradedBlip(t *testing.T) {
	t.Parallel()
	op, s, degradedAt := degradedAfterAppsLatch(t, "6s")
	// Back to flapping out of phase: a, then b.
	must(t, s.SetAppsHealth(ctx, kargo.HealthProgressing, app("a", "Healthy"), app("b", "Progressing")))
	waitFor(t, "a to count towards recovery", func() bool { return len(stageRecord(t, s).AppsRecovered) == 1 })
	must(t, s.SetAppsHealth(ctx, kargo.HealthProgressing, app("a", "Progressing"), app("b", "Healthy")))
	r := waitPhase(t, s, latch.PhaseLatched)
	if r.DegradedSince != nil || r.AppsRecovered != nil {
		t.Errorf("recovered record keeps degradedSince %v, appsRecovered %v", r.DegradedSince, r.AppsRecovered)
	}
	if ev := waitEvent(t, s, api.ReasonStageRecovered); !strings.Contains(ev.Message, "every Application") {
		t.Errorf("StageRecovered says %q, want the per-App recovery", ev.Message)
	}
	// Past the grace it stays Latched and unpaused.
	time.Sleep(time.Until(degradedAt.Add(7 * time.Second))) // the scenario, not a wait: time passes beyond the grace
	op.processed(t, "a nudge past the grace", nudge(s))
	if r := stageRecord(t, s); r.Phase != latch.PhaseLatched {
		t.Errorf("phase %s past the grace, want Latched", r.Phase)
	}
	if paused(t, s) {
		t.Error("Stage paused after it recovered")
	}
}

// degradedAfterAppsLatch makes a Stage with pause-on-failure and the given
// degraded grace, latches it by its Apps, then turns one App Degraded
// (Kargo's aggregate Unhealthy) and waits for Degraded. It returns the
// operator, the Stage and when the App turned Degraded.
func degradedAfterAppsLatch(t *testing.T, grace string) (*operator, *driver.Stage, time.Time) {
	t.Helper()
	ns := env.newProject(t)
	op := startOperator(t, ns, fastSettings())
	s := env.createStage(t, ns, "test", map[string]string{
		api.DegradedGraceAnnotation:  grace,
		api.PauseOnFailureAnnotation: "true",
	}, appsAB)
	if r, _ := latchByApps(t, s); r.LatchedBy != latch.LatchedByApps {
		t.Fatalf("latchedBy = %q, want %q", r.LatchedBy, latch.LatchedByApps)
	}
	must(t, s.SetAppsHealth(ctx, kargo.HealthUnhealthy, app("a", "Degraded"), app("b", "Healthy")))
	degradedAt := time.Now()
	waitPhase(t, s, latch.PhaseDegraded)
	return op, s, degradedAt
}

// TestAppsLatchNeedsEveryHealthCheck: Kargo writes an entry in the health
// output only for a health check that returned output, yet every check
// counts in the aggregate (kargo-api-facts.md §11.7). With two checks (each
// naming one App) and one entry, the Stage may be Progressing for the check
// nobody sees: the App of the other, Healthy, neither latches the cycle nor
// marks its Freight. Once both checks report, their Apps, each Healthy in
// turn, latch it as usual.
func TestAppsLatchNeedsEveryHealthCheck(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	op := startOperatorAs(t, env.marker, ns, fastSettings())
	s, err := env.kargo.CreateStage(ctx, ns, "test", markVerified, driver.WithHealthChecks(2))
	must(t, err)
	name := promote(t, s)
	u, err := s.Get(ctx)
	must(t, err)
	if checks, _, _ := unstructured.NestedSlice(u.Object, "status", "lastPromotion", "status", "healthChecks"); len(checks) != 2 {
		t.Fatalf("the last promotion left %d health checks, want 2", len(checks))
	}
	checked := s.CheckedApps()
	first, second := checked[0][0], checked[1][0]

	op.processed(t, "App "+first+" Healthy, the second check without output", func() error {
		return s.SetChecksHealth(ctx, kargo.HealthProgressing, app(first, "Healthy"))
	})
	if r := stageRecord(t, s); r.Phase != latch.PhasePromoted || len(r.AppsHealthy) != 0 {
		t.Errorf("with a health check without output: phase %s, appsHealthy %v; want Promoted, none", r.Phase, r.AppsHealthy)
	}
	assertNotVerified(t, op, s, name, "a health check without output")

	must(t, s.SetChecksHealth(ctx, kargo.HealthProgressing, app(first, "Healthy"), app(second, "Progressing")))
	waitFor(t, "App "+first+" to count as Healthy", func() bool { return len(stageRecord(t, s).AppsHealthy) == 1 })
	must(t, s.SetChecksHealth(ctx, kargo.HealthProgressing, app(first, "Progressing"), app(second, "Healthy")))
	if r := waitPhase(t, s, latch.PhaseLatched); r.LatchedBy != latch.LatchedByApps || len(r.AppsHealthy) != 2 {
		t.Errorf("latched by %q with appsHealthy %v, want by Applications, both", r.LatchedBy, r.AppsHealthy)
	}
	waitVerified(t, s, name)
}
