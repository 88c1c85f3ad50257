package latch

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func app(name, health string) App {
	return App{Name: name, Namespace: "argocd", Health: health, Sync: "Synced"}
}

// flapping is what Kargo shows after p1 with two Apps, updated by one
// argocd-update step: the last promotion left one health check, whose one
// output entry lists both Apps, and the aggregate is Progressing whenever
// either App is.
func flapping(a, b string) Observation {
	return with(stageAfterP1(HealthProgressing), func(o *Observation) {
		o.Stage, o.FreightNames = "test", []string{"f-p1"}
		o.Apps = []App{app("a", a), app("b", b)}
		o.HealthChecks, o.HealthOutputs = 1, 1
	})
}

func TestPerAppLatch(t *testing.T) {
	s := defaults()
	r := promoted()

	// a is Healthy while b rolls out: a is remembered, nothing latches.
	res := Step(s, r, flapping("Healthy", "Progressing"), at(minutes(1)))
	if res.Record.Phase != PhasePromoted {
		t.Fatalf("phase %s after one App was Healthy, want Promoted", res.Record.Phase)
	}
	if diff := cmp.Diff(map[string]time.Time{"argocd/a": at(minutes(1))}, res.Record.AppsHealthy); diff != "" {
		t.Errorf("AppsHealthy (-want +got):\n%s", diff)
	}

	// a seen Healthy again does not move its first time.
	res = Step(s, res.Record, flapping("Healthy", "Progressing"), at(minutes(2)))
	if got := res.Record.AppsHealthy["argocd/a"]; !got.Equal(at(minutes(1))) {
		t.Errorf("a's first Healthy moved to %v", got)
	}

	// b Healthy while a scales: every App has been Healthy, each at its
	// own moment, so the cycle latches now although the Stage never was.
	res = Step(s, res.Record, flapping("Progressing", "Healthy"), at(minutes(3)))
	rec := res.Record
	if rec.Phase != PhaseLatched || rec.LatchedBy != LatchedByApps || !rec.LatchedAt.Equal(at(minutes(3))) {
		t.Fatalf("got phase %s by %q at %v, want Latched by Applications at %v", rec.Phase, rec.LatchedBy, rec.LatchedAt, at(minutes(3)))
	}
	want := []Action{{Kind: ActionLatched, Message: "every Application (2) was Healthy after promotion p1", TimeToLatch: minutes(3)}}
	if diff := cmp.Diff(want, res.Actions); diff != "" {
		t.Errorf("actions (-want +got):\n%s", diff)
	}

	// After the latch, nothing changes while the Apps go on flapping.
	for i, o := range []Observation{flapping("Progressing", "Progressing"), flapping("Healthy", "Progressing"), flapping("Progressing", "Healthy")} {
		o.PreviousHealth = HealthProgressing
		next := Step(s, rec, o, at(minutes(4+i)))
		if diff := cmp.Diff(rec, next.Record); diff != "" {
			t.Errorf("flap %d changed the record (-before +after):\n%s", i, diff)
		}
	}
}

func TestPerAppLatchRules(t *testing.T) {
	cases := map[string]struct {
		obs         Observation
		wantApps    []string
		wantLatched bool
	}{
		"an App Healthy while the aggregate is Unhealthy (wrong revision) does not count": {
			obs: with(flapping("Healthy", "Healthy"), func(o *Observation) { o.Health = HealthUnhealthy }),
		},
		"an App Healthy while the aggregate is Unknown does not count": {
			obs: with(flapping("Healthy", "Healthy"), func(o *Observation) { o.Health = HealthUnknown }),
		},
		"an App Healthy but OutOfSync does not count": {
			obs: with(flapping("Healthy", "Progressing"), func(o *Observation) { o.Apps[0].Sync = "OutOfSync" }),
		},
		"nothing counts while a promotion runs": {
			obs: with(flapping("Healthy", "Healthy"), func(o *Observation) { o.PromotionRunning = true }),
		},
		"nothing counts after a promotion that did not succeed": {
			obs: with(flapping("Healthy", "Healthy"), func(o *Observation) { o.LastPromotion = promo("p2", PromotionFailed, minutes(1)) }),
		},
		"both Apps Healthy at once under a Progressing aggregate latch by Applications": {
			obs: flapping("Healthy", "Healthy"), wantApps: []string{"argocd/a", "argocd/b"}, wantLatched: true,
		},
		"a latch on the Stage's own Healthy keeps no per-App times": {
			obs: with(flapping("Healthy", "Healthy"), func(o *Observation) { o.Health = HealthHealthy }), wantLatched: true,
		},
		"no per-App data: only the aggregate rule": {
			obs: with(flapping("Healthy", "Healthy"), func(o *Observation) { o.Apps = nil }),
		},
		"a health check that wrote no output (fewer entries than checks): only the aggregate rule": {
			obs: with(flapping("Healthy", "Healthy"), func(o *Observation) { o.HealthChecks, o.HealthOutputs = 2, 1 }),
		},
		"every health check wrote its output: latch by Applications": {
			obs: with(flapping("Healthy", "Healthy"), func(o *Observation) { o.HealthChecks, o.HealthOutputs = 2, 2 }), wantApps: []string{"argocd/a", "argocd/b"}, wantLatched: true,
		},
		"Apps listed but no health checks recorded (a Kargo that does not record them): only the aggregate rule": {
			obs: with(flapping("Healthy", "Healthy"), func(o *Observation) { o.HealthChecks, o.HealthOutputs = 0, 1 }),
		},
		"more output entries than health checks: only the aggregate rule": {
			obs: with(flapping("Healthy", "Healthy"), func(o *Observation) { o.HealthChecks, o.HealthOutputs = 2, 3 }),
		},
		"no health checks recorded does not hold back the aggregate rule": {
			obs: with(flapping("Healthy", "Healthy"), func(o *Observation) { o.HealthChecks, o.HealthOutputs, o.Health = 0, 1, HealthHealthy }), wantLatched: true,
		},
		"a health check without output does not hold back the aggregate rule": {
			obs: with(flapping("Healthy", "Healthy"), func(o *Observation) { o.HealthChecks, o.HealthOutputs, o.Health = 2, 1, HealthHealthy }), wantLatched: true,
		},
		"more Apps than the bound: only the aggregate rule": {
			obs: with(stageAfterP1(HealthProgressing), func(o *Observation) {
				for i := range MaxApps + 1 {
					o.Apps = append(o.Apps, app(fmt.Sprint(i), "Healthy"))
				}
			}),
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			res := Step(defaults(), promoted(), tc.obs, at(minutes(1)))
			var apps []string
			for k := range res.Record.AppsHealthy {
				apps = append(apps, k)
			}
			if diff := cmp.Diff(tc.wantApps, apps, cmpopts.SortSlices(func(a, b string) bool { return a < b }), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("AppsHealthy (-want +got):\n%s", diff)
			}
			if latched := res.Record.Phase == PhaseLatched; latched != tc.wantLatched {
				t.Errorf("latched = %v, want %v (phase %s)", latched, tc.wantLatched, res.Record.Phase)
			}
		})
	}
}

func TestPerAppLatchAfterwards(t *testing.T) {
	s := defaults()
	rec := Step(s, promoted(), flapping("Healthy", "Healthy"), at(minutes(1))).Record

	// A Degraded App makes Kargo's aggregate Unhealthy: that degrades.
	degradedApp := with(flapping("Healthy", "Degraded"), func(o *Observation) { o.Health = HealthUnhealthy })
	res := Step(s, rec, degradedApp, at(minutes(2)))
	if res.Record.Phase != PhaseDegraded {
		t.Fatalf("phase %s with a Degraded App, want Degraded", res.Record.Phase)
	}
	// Past the grace it fails.
	if got := Step(s, res.Record, degradedApp, at(minutes(8))).Record.Phase; got != PhaseFailed {
		t.Errorf("phase %s past the grace, want Failed", got)
	}

	// A new cycle forgets the Apps of the last one.
	next := with(flapping("Progressing", "Progressing"), func(o *Observation) {
		o.LastPromotion, o.FreightID, o.FreightNames = promo("p2", PromotionSucceeded, minutes(3)), "F2", []string{"f-p2"}
	})
	res = Step(s, rec, next, at(minutes(4)))
	if res.Record.Phase != PhasePromoted || len(res.Record.AppsHealthy) != 0 || res.Record.LatchedBy != "" {
		t.Errorf("new cycle kept %v (phase %s, latched by %q)", res.Record.AppsHealthy, res.Record.Phase, res.Record.LatchedBy)
	}
}

func TestMarkVerified(t *testing.T) {
	on := defaults()
	on.MarkVerified = true
	fresh := func(o Observation) Observation { o.MayMark = true; return o }

	// The step that latches does not mark: the latch is stored first, so
	// that verifiedAt is a latchedAt that no crash can change.
	latchedByApps := Step(on, promoted(), fresh(flapping("Healthy", "Healthy")), at(minutes(1)))
	if latchedByApps.Record.Phase != PhaseLatched || hasAction(latchedByApps, ActionMarkVerified) {
		t.Fatalf("latching step: phase %s, actions %+v; want Latched and no mark yet", latchedByApps.Record.Phase, latchedByApps.Actions)
	}
	if !MarkDue(on, latchedByApps.Record, flapping("Progressing", "Healthy"), at(minutes(1))) {
		t.Error("MarkDue is false right after the latch")
	}
	// Stepping the stored latch on a fresh view asks for the mark.
	res := Step(on, latchedByApps.Record, fresh(flapping("Progressing", "Healthy")), at(minutes(2)))
	wantMark := Action{Kind: ActionMarkVerified, Freight: []string{"f-p1"}, VerifiedAt: at(minutes(1)),
		Message: "promotion p1 latched (every Application was Healthy in this cycle)"}
	if a, ok := actionOfKind(res, ActionMarkVerified); !ok || !cmp.Equal(wantMark, a) {
		t.Fatalf("asked %+v, want %+v", a, wantMark)
	}
	if diff := cmp.Diff([]string{"f-p1"}, res.Record.Marked); diff != "" {
		t.Errorf("Marked (-want +got):\n%s", diff)
	}
	// Asked once per cycle and Freight.
	if again := Step(on, res.Record, fresh(flapping("Healthy", "Healthy")), at(minutes(3))); hasAction(again, ActionMarkVerified) {
		t.Errorf("asked to mark again: %+v", again.Actions)
	}
	if MarkDue(on, res.Record, flapping("Healthy", "Healthy"), at(minutes(3))) {
		t.Error("MarkDue is true once the Freight is marked")
	}

	latchedRec := Step(defaults(), promoted(), flapping("Healthy", "Healthy"), at(minutes(1))).Record
	verifiedStage := func(phase VerificationPhase, msg string) Observation {
		return with(flapping("Healthy", "Healthy"), func(o *Observation) {
			o.HasVerification = true
			o.Verification = &Verification{ID: "v1", Phase: phase, Message: msg}
		})
	}
	cases := map[string]struct {
		settings Settings
		prior    Record
		obs      Observation
		want     bool
	}{
		"a latched cycle, turned on later, is marked": {on, latchedRec, flapping("Progressing", "Healthy"), true},
		"mark-verified off":                           {defaults(), latchedRec, flapping("Healthy", "Healthy"), false},
		"paused":                                      {on, latchedRec, with(flapping("Healthy", "Healthy"), func(o *Observation) { o.Pauses = []string{"p"} }), false},
		"Degraded":                                    {on, degraded(minutes(1)), with(flapping("Healthy", "Healthy"), func(o *Observation) { o.Health = HealthUnhealthy }), false},
		"Failed":                                      {on, failedAt(latchedRec, minutes(1), ReasonDegraded, "x"), flapping("Healthy", "Healthy"), false},
		"still Promoted":                              {on, promoted(), flapping("Healthy", "Progressing"), false},
		"latched in this very step":                   {on, promoted(), flapping("Healthy", "Healthy"), false},
		"a promotion running":                         {on, latchedRec, with(flapping("Healthy", "Healthy"), func(o *Observation) { o.PromotionRunning = true }), false},
		"the promotion's Freight is not yet in the history": {on, latchedRec, with(flapping("Healthy", "Healthy"), func(o *Observation) { o.FreightNames = []string{"f-old"} }), false},
		"verification Pending":                              {on, latchedRec, verifiedStage(VerificationPending, ""), false},
		"verification Running":                              {on, latchedRec, verifiedStage(VerificationRunning, ""), false},
		"verification Failed":                               {on, latchedRec, verifiedStage(VerificationFailed, "analysis failed"), false},
		"verification Error":                                {on, latchedRec, verifiedStage(VerificationError, ""), false},
		"verification Inconclusive":                         {on, latchedRec, verifiedStage("Inconclusive", ""), false},
		"verification aborted by a user":                    {on, latchedRec, verifiedStage(VerificationFailed, UserAbortMessage), false},
		"verification not started":                          {on, latchedRec, with(flapping("Healthy", "Healthy"), func(o *Observation) { o.HasVerification = true }), false},
		"verification Successful":                           {on, latchedRec, verifiedStage(VerificationSuccessful, ""), true},
		"already marked in this cycle":                      {on, func() Record { r := latchedRec.clone(); r.Marked = []string{"f-p1"}; return r }(), flapping("Healthy", "Healthy"), false},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			if due := MarkDue(tc.settings, tc.prior, tc.obs, at(minutes(10))); due != tc.want {
				t.Errorf("MarkDue = %v, want %v", due, tc.want)
			}
			res := Step(tc.settings, tc.prior, fresh(tc.obs), at(minutes(10)))
			a, marked := actionOfKind(res, ActionMarkVerified)
			if marked != tc.want {
				t.Fatalf("asked to mark = %v, want %v (actions %+v)", marked, tc.want, res.Actions)
			}
			if marked && !a.VerifiedAt.Equal(*tc.prior.LatchedAt) {
				t.Errorf("verifiedAt %v, want the stored latch time %v", a.VerifiedAt, tc.prior.LatchedAt)
			}
			if without := Step(tc.settings, tc.prior, tc.obs, at(minutes(10))); hasAction(without, ActionMarkVerified) {
				t.Error("asked to mark on a view the operator did not read fresh (MayMark false)")
			}
		})
	}
}

func actionOfKind(res Result, kind ActionKind) (Action, bool) {
	for _, a := range res.Actions {
		if a.Kind == kind {
			return a, true
		}
	}
	return Action{}, false
}

// Apps that come and go within a cycle never push the record past its
// bound: an App no longer listed is forgotten.
func TestAppsHealthyStaysWithinTheBound(t *testing.T) {
	r := promoted()
	for round := range 3 {
		obs := stageAfterP1(HealthProgressing)
		for i := range 80 {
			health := "Healthy"
			if i == 0 {
				health = "Progressing" // keep the cycle from latching
			}
			obs.Apps = append(obs.Apps, app(fmt.Sprint("r", round, "-", i), health))
		}
		r = Step(defaults(), r, obs, at(minutes(round+1))).Record
		if len(r.AppsHealthy) > MaxApps {
			t.Fatalf("round %d: %d Apps recorded", round, len(r.AppsHealthy))
		}
		if _, err := Decode(r.Encode()); err != nil {
			t.Fatalf("round %d: the record no longer decodes: %v", round, err)
		}
	}
}

// A Stage latched by its Apps recovers from Degraded the way it latched:
// once every App was Healthy again, each at its own moment, although the
// Stage is never Healthy as a whole. Otherwise one blip would fail it.
func TestPerAppRecovery(t *testing.T) {
	s := defaults()
	rec := Step(s, promoted(), flapping("Healthy", "Healthy"), at(minutes(1))).Record
	blip := with(flapping("Healthy", "Degraded"), func(o *Observation) { o.Health = HealthUnhealthy })
	rec = Step(s, rec, blip, at(minutes(2))).Record
	if rec.Phase != PhaseDegraded {
		t.Fatalf("phase %s after a Degraded App, want Degraded", rec.Phase)
	}
	// While Unhealthy, no App counts towards recovery.
	rec = Step(s, rec, blip, at(minutes(3))).Record
	if len(rec.AppsRecovered) != 0 {
		t.Errorf("Apps counted under an Unhealthy aggregate: %v", rec.AppsRecovered)
	}
	res := Step(s, rec, flapping("Healthy", "Progressing"), at(minutes(4)))
	if res.Record.Phase != PhaseDegraded {
		t.Fatalf("phase %s with one App back, want still Degraded", res.Record.Phase)
	}
	res = Step(s, res.Record, flapping("Progressing", "Healthy"), at(minutes(5)))
	want := []Action{{Kind: ActionRecovered, Message: "every Application (2) was Healthy again"}}
	if diff := cmp.Diff(want, res.Actions); diff != "" || res.Record.Phase != PhaseLatched || res.Record.AppsRecovered != nil {
		t.Errorf("phase %s, appsRecovered %v, actions (-want +got):\n%s", res.Record.Phase, res.Record.AppsRecovered, diff)
	}
	// Nor while a health check wrote no output: the Apps listed are not
	// all that Kargo checks.
	partial := func(o Observation) Observation { o.HealthChecks, o.HealthOutputs = 2, 1; return o }
	hidden := Step(s, rec, partial(flapping("Healthy", "Progressing")), at(minutes(4)))
	hidden = Step(s, hidden.Record, partial(flapping("Progressing", "Healthy")), at(minutes(5)))
	if hidden.Record.Phase != PhaseDegraded || len(hidden.Record.AppsRecovered) != 0 {
		t.Errorf("with a health check without output: phase %s, appsRecovered %v; want Degraded, none", hidden.Record.Phase, hidden.Record.AppsRecovered)
	}
	// Without every App back within the grace, the cycle fails as before.
	late := Step(s, rec, flapping("Healthy", "Progressing"), at(minutes(4)))
	if got := Step(s, late.Record, flapping("Healthy", "Progressing"), at(minutes(8))).Record.Phase; got != PhaseFailed {
		t.Errorf("phase %s past the grace with one App never back, want Failed", got)
	}
}
