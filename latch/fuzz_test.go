package latch

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// observationsFrom turns fuzz bytes into settings and a sequence of timed
// observations over a small alphabet of promotions, health, freight and
// verifications, so that the fuzzer reaches every phase quickly.
func observationsFrom(data []byte) (Settings, []Observation, []time.Duration) {
	next := func() byte {
		if len(data) == 0 {
			return 0
		}
		b := data[0]
		data = data[1:]
		return b
	}
	s := Settings{LatchDeadline: time.Duration(next()%4) * time.Minute, DegradedGrace: time.Duration(next()%4) * time.Minute}
	s.PauseOnFailure = s.LatchDeadline%(2*time.Minute) == 0
	flags := next()
	s.MarkVerified = flags&1 != 0
	hasVerification := flags&2 != 0
	if flags&4 != 0 {
		s.NewFailureWindow = 5 * time.Minute
	}
	phases := []PromotionPhase{PromotionSucceeded, PromotionFailed, PromotionErrored, PromotionAborted, "Running", "Bogus"}
	healths := []Health{HealthMissing, HealthHealthy, HealthNotApplicable, HealthProgressing, HealthUnknown, HealthUnhealthy}
	verifications := []VerificationPhase{VerificationSuccessful, VerificationFailed, VerificationError, VerificationPending, VerificationRunning, "Inconclusive"}
	var obs []Observation
	var steps []time.Duration
	for len(data) > 0 && len(obs) < 64 {
		p, h, f, v, dt, a := next(), next(), next(), next(), next(), next()
		o := Observation{Stage: "s", Health: healths[int(h)%len(healths)], PromotionRunning: f&0x80 != 0, HasVerification: hasVerification, MayMark: dt&1 != 0}
		// Up to three Apps, each Healthy, Progressing or Degraded, and
		// Synced or not: two bits of health and one of sync each.
		appHealths := []string{"Healthy", "Progressing", "Degraded", "Healthy"}
		for i := range int(a>>6) % 4 {
			sync := "Synced"
			if a&(1<<i) != 0 && i < 2 {
				sync = "OutOfSync"
			}
			// Names from a pool that changes with the promotion, so that a
			// cycle can see Apps come and go.
			o.Apps = append(o.Apps, App{Name: fmt.Sprint("app", i, "-", p%3), Namespace: "argocd", Health: appHealths[int(a>>(2*i))%4], Sync: sync})
		}
		if len(o.Apps) > 0 {
			// One output entry, of one health check or, now and then, of
			// two (the other returned no output: the Apps do not count).
			o.HealthChecks, o.HealthOutputs = 1+int(f>>4&1), 1
		}
		if v&0x80 != 0 {
			o.Pauses = []string{"pause-" + fmt.Sprint(v%3)}
		}
		if f&0x20 != 0 {
			created := t0.Add(-time.Duration(dt) * time.Minute)
			o.CreatedWithoutRecord = &created
		}
		if v&0x40 != 0 && f&0x40 != 0 {
			// A failure's pause someone deleted, held for resume.
			o.Deleted = []string{"s-promotionfailed-" + fmt.Sprint(v%2)}
		}
		if p%7 != 0 {
			finished := time.Duration(p%5) * time.Minute
			o.LastPromotion = &Promotion{Name: fmt.Sprintf("p%d", p%7), Phase: phases[int(p/7)%len(phases)], Freight: "f"}
			if p&0x80 == 0 {
				o.LastPromotion.FinishedAt = ptr(finished)
			}
		}
		if f%5 != 0 {
			o.FreightID, o.Freight = fmt.Sprintf("F%d", f%5), fmt.Sprintf("f%d", f%5)
			o.FreightNames = []string{o.Freight}
		}
		if v%4 != 0 {
			msg := ""
			if v&0x40 != 0 {
				msg = UserAbortMessage
			}
			o.Verification = &Verification{ID: fmt.Sprintf("v%d", v%4), Phase: verifications[int(v/4)%len(verifications)], Message: msg}
		}
		if len(obs) > 0 {
			o.PreviousHealth = obs[len(obs)-1].Health
		}
		obs = append(obs, o)
		steps = append(steps, time.Duration(dt)*7*time.Second)
	}
	return s, obs, steps
}

func FuzzStep(f *testing.F) {
	f.Add([]byte{1, 1, 1, 1, 1, 0, 0})
	f.Add([]byte{2, 2, 1, 3, 1, 0, 9, 1, 2, 1, 0, 30, 1, 5, 1, 0, 40, 1, 1, 1, 0, 200})
	f.Add([]byte{1, 0, 1, 4, 1, 1, 50, 8, 4, 2, 0, 2, 15, 0, 3, 5, 255})
	f.Fuzz(func(t *testing.T, data []byte) {
		s, obs, steps := observationsFrom(data)
		var rec Record
		now := t0
		for i, o := range obs {
			now = now.Add(steps[i])
			res := Step(s, rec, o, now)
			checkInvariants(t, s, rec, o, now, res)
			rec = res.Record
		}
	})
}

func checkInvariants(t *testing.T, s Settings, prior Record, o Observation, now time.Time, res Result) {
	t.Helper()
	r := res.Record
	if r.Phase == PhaseFailed && (r.Failure == nil || r.Failure.Reason == "") {
		t.Fatalf("Failed without a reason: %+v", r)
	}
	for _, a := range res.Actions {
		if a.Kind == ActionFailed && a.Reason == "" {
			t.Fatalf("ActionFailed without a reason: %+v", a)
		}
		if a.Kind == ActionCreatePause && (r.Failure == nil || r.Failure.Pause != a.Pause || !s.PauseOnFailure) {
			t.Fatalf("asked for pause %q but the record's failure is %+v", a.Pause, r.Failure)
		}
	}
	if (len(prior.Pauses) == 0) != (len(r.Pauses) == 0) && !hasAction(res, ActionPaused) && !hasAction(res, ActionResumed) {
		t.Fatalf("pauses went from %v to %v without a Paused or Resumed action", prior.Pauses, r.Pauses)
	}
	// Garbage, a removed record or a first install never pauses by itself.
	if prior.IsZero() && o.CreatedWithoutRecord == nil && hasAction(res, ActionCreatePause) {
		t.Fatalf("a Stage without a usable record was paused: %+v", res.Actions)
	}
	// A pause holds the latch deadline: a drain leaves Kargo health-blind.
	if f, ok := actionOfKind(res, ActionFailed); ok && f.Reason == ReasonLatchDeadlineExceeded && len(prior.Pauses) > 0 {
		t.Fatalf("the latch deadline failed a paused cycle: pauses %v", prior.Pauses)
	}
	// What paused the Stage is kept while it is paused, even once other
	// pauses replace it, and forgotten on resume.
	paused, becamePaused := actionOfKind(res, ActionPaused)
	if (r.PausedBy != nil && len(r.Pauses) == 0) || (becamePaused && (r.PausedBy == nil || r.PausedBy.Name != paused.Pause)) {
		t.Fatalf("pausedBy %+v with pauses %v (before %v), actions %+v", r.PausedBy, r.Pauses, prior.Pauses, res.Actions)
	}

	// The record survives its own encoding.
	decoded, err := Decode(r.Encode())
	if err != nil {
		t.Fatalf("record does not decode: %v\n%s", err, r.Encode())
	}
	if enc := r.Encode(); decoded.Encode() != enc {
		t.Fatalf("record changed through encoding:\nbefore %s\nafter  %s", enc, decoded.Encode())
	}

	// After the latch, Progressing never changes the phase: the same step
	// with Healthy instead of Progressing ends in the same phase, unless the
	// observation began a new cycle (which may latch at once when Healthy).
	if prior.Phase == PhaseLatched && o.Health == HealthProgressing && !hasAction(res, ActionCycleStarted) {
		healthy := o
		healthy.Health = HealthHealthy
		if got := Step(s, prior, healthy, now).Record.Phase; got != r.Phase {
			t.Fatalf("Latched: Progressing gave %s but Healthy gave %s", r.Phase, got)
		}
	}

	// After the latch, Progressing of any App never changes the phase
	// either: the same step with those Apps Healthy ends the same.
	if prior.Phase == PhaseLatched && !hasAction(res, ActionCycleStarted) {
		healthyApps := o
		healthyApps.Apps = nil
		for _, a := range o.Apps {
			if a.Health == "Progressing" {
				a.Health = "Healthy"
			}
			healthyApps.Apps = append(healthyApps.Apps, a)
		}
		if got := Step(s, prior, healthyApps, now).Record.Phase; got != r.Phase {
			t.Fatalf("Latched: Apps Progressing gave %s but Healthy gave %s", r.Phase, got)
		}
	}

	// A Freight is marked only in a Latched cycle with mark-verified on and
	// no pause, and once per cycle.
	for _, a := range res.Actions {
		if a.Kind != ActionMarkVerified {
			continue
		}
		if !s.MarkVerified || !o.MayMark || r.Phase != PhaseLatched || len(o.Pauses) > 0 || r.LatchedAt == nil || !a.VerifiedAt.Equal(*r.LatchedAt) {
			t.Fatalf("marked %v (settings %+v, phase %s, pauses %v)", a.Freight, s, r.Phase, o.Pauses)
		}
		if prior.Phase != PhaseLatched || prior.LatchedAt == nil || !prior.LatchedAt.Equal(a.VerifiedAt) {
			t.Fatalf("marked %v before the latch was stored (prior %s)", a.Freight, prior.Phase)
		}
		if o.HasVerification && (o.Verification == nil || o.Verification.Phase != VerificationSuccessful) {
			t.Fatalf("marked %v with verification %+v", a.Freight, o.Verification)
		}
		for _, f := range a.Freight {
			if !hasAction(res, ActionCycleStarted) && slices.Contains(prior.Marked, f) {
				t.Fatalf("marked %s twice in one cycle", f)
			}
		}
	}
	if len(r.AppsHealthy) > MaxApps {
		t.Fatalf("record holds %d Apps", len(r.AppsHealthy))
	}

	// RequeueAfter is positive exactly when a time-based transition is
	// pending: nothing changes just before it, and the cycle fails at it.
	// With no requeue, nothing changes however long the same view lasts.
	again := o
	again.PreviousHealth = o.Health
	switch {
	case res.RequeueAfter < 0:
		t.Fatalf("negative RequeueAfter %v", res.RequeueAfter)
	case res.RequeueAfter > 0:
		if before := Step(s, r, again, now.Add(res.RequeueAfter-time.Nanosecond)); before.Record.Phase != r.Phase {
			t.Fatalf("phase changed from %s to %s before the requeue was due", r.Phase, before.Record.Phase)
		}
		if due := Step(s, r, again, now.Add(res.RequeueAfter)); due.Record.Phase != PhaseFailed {
			t.Fatalf("requeue of %v was due but the phase is %s, want Failed", res.RequeueAfter, due.Record.Phase)
		}
	default:
		if later := Step(s, r, again, now.Add(1000*time.Hour)); later.Record.Phase != r.Phase {
			t.Fatalf("no requeue, yet the phase moved from %s to %s with time alone", r.Phase, later.Record.Phase)
		}
	}
}

func hasAction(res Result, kind ActionKind) bool { return res.Has(kind) }
