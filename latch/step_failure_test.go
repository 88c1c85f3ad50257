package latch

import (
	"strings"
	"testing"
	"time"
)

func TestPauseNamesAreStableAndValid(t *testing.T) {
	s := Settings{LatchDeadline: minutes(30), DegradedGrace: minutes(5), PauseOnFailure: true}
	obs := with(stageAfterP1(HealthUnhealthy), func(o *Observation) { o.Stage = "prod" })
	a := Step(s, degraded(minutes(3)), obs, at(minutes(8)))
	b := Step(s, degraded(minutes(3)), obs, at(minutes(9)))
	if a.Record.Failure.Pause == "" || a.Record.Failure.Pause != b.Record.Failure.Pause {
		t.Errorf("the same failure judged at two times named pauses %q and %q", a.Record.Failure.Pause, b.Record.Failure.Pause)
	}
	long := with(obs, func(o *Observation) { o.Stage = strings.Repeat("s", 253) })
	name := Step(s, degraded(minutes(3)), long, at(minutes(8))).Record.Failure.Pause
	if len(name) > 253 || !strings.HasSuffix(name, a.Record.Failure.Pause[len("prod"):len("prod-degraded-")]+name[len(name)-8:]) {
		t.Errorf("pause name for a long Stage name is %d long: %q", len(name), name)
	}
	other := Step(s, degraded(minutes(3)), with(obs, func(o *Observation) { o.Stage = "qa" }), at(minutes(8)))
	if other.Record.Failure.Pause == a.Record.Failure.Pause {
		t.Errorf("two Stages share the pause name %q", a.Record.Failure.Pause)
	}
}

// The operator makes a failure's pause, then steps again with it covering
// the Stage: that pause must not hold the deadline whose failure made it.
func TestAFailurePauseDoesNotHoldItsOwnDeadline(t *testing.T) {
	s := Settings{LatchDeadline: minutes(30), PauseOnFailure: true}
	obs := with(stageAfterP1(HealthProgressing), func(o *Observation) { o.Stage = "prod" })
	first := Step(s, promoted(), obs, at(minutes(30)))
	if !hasAction(first, ActionCreatePause) {
		t.Fatalf("no pause asked for at the deadline: %+v", first.Actions)
	}
	name := first.Record.Failure.Pause
	second := Step(s, promoted(), with(obs, func(o *Observation) { o.Pauses = []string{name} }), at(minutes(30)))
	if second.Record.Phase != PhaseFailed || second.Record.Failure.Pause != name || !hasAction(second, ActionPaused) {
		t.Errorf("with its own pause: phase %s, failure %+v, actions %+v; want Failed, paused by %s", second.Record.Phase, second.Record.Failure, second.Actions, name)
	}
}

// A Stage without a record whose promotion failed a moment ago was made and
// failed while no replica led: the failure is acted on. One that failed
// days ago (a first install) is only recorded.
func TestRecordlessStageFailures(t *testing.T) {
	s := Settings{LatchDeadline: minutes(30), PauseOnFailure: true, NewFailureWindow: minutes(15)}
	obs := Observation{Stage: "prod", LastPromotion: promo("p1", PromotionFailed, 0), Health: HealthUnknown, CreatedWithoutRecord: ptr(0)}
	for name, tc := range map[string]struct {
		now   time.Time
		pause bool
	}{
		"failed a moment ago":              {at(minutes(1)), true},
		"failed at the edge of the window": {at(minutes(15)), true},
		"failed a moment from now (skew)":  {at(-time.Second), true},
		"failed days ago":                  {at(72 * time.Hour), false},
	} {
		t.Run(name, func(t *testing.T) {
			res := Step(s, Record{}, obs, tc.now)
			if res.Record.Phase != PhaseFailed || res.Record.Failure.Reason != ReasonPromotionFailed {
				t.Fatalf("phase %s, failure %+v; want Failed with PromotionFailed", res.Record.Phase, res.Record.Failure)
			}
			if got := hasAction(res, ActionCreatePause); got != tc.pause {
				t.Errorf("asked for a pause: %v, want %v (actions %+v)", got, tc.pause, res.Actions)
			}
			again := Step(s, res.Record, obs, tc.now.Add(time.Minute))
			if len(again.Actions) != 0 {
				t.Errorf("judged twice: %+v", again.Actions)
			}
		})
	}
	for name, o := range map[string]Observation{
		"garbage or removed record": with(obs, func(o *Observation) { o.CreatedWithoutRecord = nil }),
		"old Stage":                 with(obs, func(o *Observation) { o.CreatedWithoutRecord = ptr(-time.Hour) }),
	} {
		if res := Step(s, Record{}, o, at(time.Second)); hasAction(res, ActionFailed) {
			t.Errorf("%s: a recent failure was acted on: %+v", name, res.Actions)
		}
	}
	s.NewFailureWindow = 0
	if res := Step(s, Record{}, obs, at(time.Second)); hasAction(res, ActionFailed) {
		t.Errorf("with no window, a record-less Stage's failure was acted on: %+v", res.Actions)
	}
}

// stepFailureCases are TestStep's cases of promotions and verifications
// that end: failures, errors, aborts, and Freight moving under them.
func stepFailureCases() map[string]stepCase {
	return map[string]stepCase{
		"a failed verification fails the cycle": {
			prior: latched(),
			obs:   with(stageAfterP1(HealthHealthy), func(o *Observation) { o.Verification = failedVerification }),
			now:   at(minutes(4)),
			want: Result{
				Record: func() Record {
					r := latched()
					r.ExaminedVerification = "v1"
					return failedAt(r, minutes(4), ReasonVerificationFailed, "verification v1 failed: analysis failed")
				}(),
				Actions: []Action{{Kind: ActionFailed, Reason: ReasonVerificationFailed, Message: "verification v1 failed: analysis failed"}},
			},
		},
		"an errored verification fails the cycle": {
			prior: latched(),
			obs: with(stageAfterP1(HealthHealthy), func(o *Observation) {
				o.Verification = &Verification{ID: "v2", Phase: VerificationError}
			}),
			now: at(minutes(4)),
			want: Result{
				Record: func() Record {
					r := latched()
					r.ExaminedVerification = "v2"
					return failedAt(r, minutes(4), ReasonVerificationError, "verification v2 errored")
				}(),
				Actions: []Action{{Kind: ActionFailed, Reason: ReasonVerificationError, Message: "verification v2 errored"}},
			},
		},
		"a verification a user aborted is not a failure": {
			prior: latched(),
			obs: with(stageAfterP1(HealthHealthy), func(o *Observation) {
				o.Verification = &Verification{ID: "v3", Phase: VerificationFailed, Message: UserAbortMessage}
			}),
			now: at(minutes(4)),
			want: Result{Record: func() Record {
				r := latched()
				r.ExaminedVerification = "v3"
				return r
			}()},
		},
		"a running verification is not judged yet": {
			prior: latched(),
			obs: with(stageAfterP1(HealthHealthy), func(o *Observation) {
				o.Verification = &Verification{ID: "v4", Phase: VerificationRunning}
			}),
			now:  at(minutes(4)),
			want: Result{Record: latched()},
		},
		"a verification already judged is not judged again": {
			prior: func() Record { r := latched(); r.ExaminedVerification = "v1"; return r }(),
			obs:   with(stageAfterP1(HealthHealthy), func(o *Observation) { o.Verification = failedVerification }),
			now:   at(minutes(4)),
			want:  Result{Record: func() Record { r := latched(); r.ExaminedVerification = "v1"; return r }()},
		},
		"a failed promotion fails the cycle": {
			prior: latched(),
			obs:   Observation{LastPromotion: promo("p2", PromotionFailed, minutes(9)), FreightID: "F1", Health: HealthUnknown},
			now:   at(minutes(10)),
			want: Result{
				Record: func() Record {
					r := latched()
					r.ExaminedPromotion = "p2"
					return failedAt(r, minutes(10), ReasonPromotionFailed, "Promotion p2 failed")
				}(),
				Actions: []Action{{Kind: ActionFailed, Reason: ReasonPromotionFailed, Message: "Promotion p2 failed"}},
			},
		},
		"an errored promotion fails an Idle Stage": {
			prior: Record{Phase: PhaseIdle},
			obs:   Observation{LastPromotion: promo("p1", PromotionErrored, 0)},
			now:   at(minutes(1)),
			want: Result{
				Record:  failedAt(Record{Phase: PhaseIdle, ExaminedPromotion: "p1"}, minutes(1), ReasonPromotionErrored, "Promotion p1 errored"),
				Actions: []Action{{Kind: ActionFailed, Reason: ReasonPromotionErrored, Message: "Promotion p1 errored"}},
			},
		},
		"an aborted promotion keeps the latch although Kargo reports Unknown": {
			prior: latched(),
			obs:   Observation{LastPromotion: promo("p2", PromotionAborted, minutes(9)), FreightID: "F1", Health: HealthUnknown},
			now:   at(minutes(30)),
			want:  Result{Record: func() Record { r := latched(); r.ExaminedPromotion = "p2"; return r }()},
		},
		"Freight moving under an aborted lastPromotion starts a cycle (replay order)": {
			prior: func() Record { r := latched(); r.ExaminedPromotion = "p3"; return r }(),
			obs:   Observation{LastPromotion: promo("p3", PromotionAborted, minutes(9)), FreightID: "F2", Freight: "f-p2", Health: HealthUnknown},
			now:   at(minutes(12)),
			want: Result{
				Record: func() Record {
					r := latched()
					r.ExaminedPromotion, r.Promotion, r.Freight, r.FreightID = "p3", "", "f-p2", "F2"
					r.Phase, r.PromotedAt, r.LatchedAt, r.LatchedBy, r.Verification = PhasePromoted, ptr(minutes(12)), nil, "", nil
					return r
				}(),
				Actions:      []Action{{Kind: ActionCycleStarted, Message: "new cycle for freight f-p2"}},
				RequeueAfter: minutes(30),
			},
		},
		"Freight arriving after its own promotion does not restart the cycle": {
			prior: func() Record { r := promoted(); r.FreightID = ""; return r }(),
			obs:   stageAfterP1(HealthMissing),
			now:   at(minutes(1)),
			want:  Result{Record: promoted(), RequeueAfter: minutes(29)},
		},
		"Failed stays Failed when health recovers": {
			prior: failedAt(degraded(minutes(3)), minutes(8), ReasonDegraded, "x"),
			obs:   stageAfterP1(HealthHealthy),
			now:   at(minutes(9)),
			want:  Result{Record: failedAt(degraded(minutes(3)), minutes(8), ReasonDegraded, "x")},
		},
	}
}
