package latch

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// stepCase is one case of TestStep: Step, given settings (defaults() when
// zero), the prior record, the observation and the time, returns want.
type stepCase struct {
	settings Settings
	prior    Record
	obs      Observation
	now      time.Time
	want     Result
}

// TestStep runs the cases of each part of the latch: a cycle up to its
// latch (stepCycleCases), the health after it (stepHealthCases, in
// step_health_test.go), failures (stepFailureCases, step_failure_test.go)
// and pauses (stepPauseCases, step_pause_test.go).
func TestStep(t *testing.T) {
	cases := map[string]stepCase{}
	for _, group := range []map[string]stepCase{stepCycleCases(), stepHealthCases(), stepFailureCases(), stepPauseCases()} {
		for name, tc := range group {
			if _, ok := cases[name]; ok {
				t.Fatalf("two cases named %q", name)
			}
			cases[name] = tc
		}
	}
	ignoreIDs := cmpopts.IgnoreFields(VerificationRecord{}, "ID")
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			s := tc.settings
			if s == (Settings{}) {
				s = defaults()
			}
			prior := tc.prior.clone()
			got := Step(s, tc.prior, tc.obs, tc.now)
			if diff := cmp.Diff(tc.want, got, ignoreIDs, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Step() mismatch (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(prior, tc.prior, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("Step() modified its prior record (-before +after):\n%s", diff)
			}
		})
	}
}

// stepCycleCases are TestStep's cases of a cycle up to its latch: the first
// look at a Stage, a new promotion, latching, and the latch deadline.
func stepCycleCases() map[string]stepCase {
	return map[string]stepCase{
		"a Stage never promoted is Idle": {
			obs:  Observation{Health: HealthHealthy},
			now:  at(0),
			want: Result{Record: Record{Phase: PhaseIdle}},
		},
		"first look at a promoted Stage adopts the cycle and counts the deadline from now": {
			obs: with(stageAfterP1(HealthProgressing), func(o *Observation) { o.LastPromotion.FinishedAt = ptr(-minutes(60)) }),
			now: at(0),
			want: Result{
				Record: Record{
					Promotion: "p1", Freight: "f-p1", FreightID: "F1", Phase: PhasePromoted,
					PromotedAt: ptr(-minutes(60)), AdoptedAt: ptr(0), ExaminedPromotion: "p1",
				},
				RequeueAfter: minutes(30),
			},
		},
		"first look at a healthy Stage latches without a time-to-latch": {
			obs: stageAfterP1(HealthHealthy),
			now: at(minutes(1)),
			want: Result{
				Record: func() Record {
					r := latched()
					r.AdoptedAt, r.LatchedAt = ptr(minutes(1)), ptr(minutes(1))
					r.Verification.FinishTime = at(minutes(1))
					r.History[0] = *r.Verification
					return r
				}(),
				Actions: []Action{{Kind: ActionLatched, Message: "Stage became Healthy after promotion p1"}},
			},
		},
		"first look at a failed promotion records the failure and does not act on it": {
			obs: Observation{LastPromotion: promo("p1", PromotionFailed, 0)},
			now: at(minutes(1)),
			want: Result{Record: failedAt(Record{Phase: PhaseIdle, ExaminedPromotion: "p1"}, minutes(1),
				ReasonPromotionFailed, "Promotion p1 failed (before kargo-latch watched this Stage)")},
		},
		"first look at a failed verification records it and does not act on it": {
			obs: with(stageAfterP1(HealthHealthy), func(o *Observation) { o.Verification = failedVerification }),
			now: at(minutes(1)),
			want: Result{Record: func() Record {
				r := promoted()
				r.AdoptedAt, r.ExaminedVerification = ptr(minutes(1)), "v1"
				return failedAt(r, minutes(1), ReasonVerificationFailed, "verification v1 failed: analysis failed (before kargo-latch watched this Stage)")
			}()},
		},
		"a new successful promotion starts a cycle at its finish": {
			prior: latched(),
			obs:   Observation{LastPromotion: promo("p2", PromotionSucceeded, minutes(10)), FreightID: "F2", Freight: "f-p2"},
			now:   at(minutes(11)),
			want: Result{
				Record: func() Record {
					r := latched()
					r.Promotion, r.Freight, r.FreightID, r.ExaminedPromotion = "p2", "f-p2", "F2", "p2"
					r.Phase, r.PromotedAt, r.LatchedAt, r.LatchedBy, r.Verification = PhasePromoted, ptr(minutes(10)), nil, "", nil
					return r
				}(),
				Actions:      []Action{{Kind: ActionCycleStarted, Message: "new cycle for promotion p2"}},
				RequeueAfter: minutes(29),
			},
		},
		"Promoted and Healthy latches with a Successful record": {
			prior: promoted(),
			obs:   stageAfterP1(HealthHealthy),
			now:   at(minutes(2)),
			want: Result{
				Record:  latched(),
				Actions: []Action{{Kind: ActionLatched, Message: "Stage became Healthy after promotion p1", TimeToLatch: minutes(2)}},
			},
		},
		"Promoted and Progressing waits for the deadline": {
			prior: promoted(),
			obs:   stageAfterP1(HealthProgressing),
			now:   at(minutes(2)),
			want:  Result{Record: promoted(), RequeueAfter: minutes(28)},
		},
		"Promoted and NotApplicable does not latch": {
			prior: promoted(),
			obs:   stageAfterP1(HealthNotApplicable),
			now:   at(minutes(2)),
			want:  Result{Record: promoted(), RequeueAfter: minutes(28)},
		},
		"Promoted past the deadline fails": {
			prior: promoted(),
			obs:   stageAfterP1(HealthProgressing),
			now:   at(minutes(30)),
			want: Result{
				Record:  failedAt(promoted(), minutes(30), ReasonLatchDeadlineExceeded, "Stage was not Healthy within 30m0s of promotion p1"),
				Actions: []Action{{Kind: ActionFailed, Reason: ReasonLatchDeadlineExceeded, Message: "Stage was not Healthy within 30m0s of promotion p1"}},
			},
		},
		"a zero deadline never fails and needs no requeue": {
			settings: Settings{DegradedGrace: minutes(5)},
			prior:    promoted(),
			obs:      stageAfterP1(HealthUnhealthy),
			now:      at(minutes(600)),
			want:     Result{Record: promoted()},
		},
		"the deadline keeps running while a promotion runs": {
			prior: promoted(),
			obs:   with(stageAfterP1(HealthUnknown), func(o *Observation) { o.PromotionRunning = true }),
			now:   at(minutes(31)),
			want: Result{
				Record:  failedAt(promoted(), minutes(31), ReasonLatchDeadlineExceeded, "Stage was not Healthy within 30m0s of promotion p1"),
				Actions: []Action{{Kind: ActionFailed, Reason: ReasonLatchDeadlineExceeded, Message: "Stage was not Healthy within 30m0s of promotion p1"}},
			},
		},
	}
}
