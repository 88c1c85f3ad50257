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
