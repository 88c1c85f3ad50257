package latch

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestStep(t *testing.T) {
	failedVerification := &Verification{ID: "v1", Phase: VerificationFailed, Message: "analysis failed"}
	cases := map[string]struct {
		settings Settings
		prior    Record
		obs      Observation
		now      time.Time
		want     Result
	}{
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
		"Latched ignores Progressing and counts the flap": {
			prior: latched(),
			obs:   with(stageAfterP1(HealthProgressing), func(o *Observation) { o.PreviousHealth = HealthHealthy }),
			now:   at(minutes(3)),
			want: Result{
				Record:  latched(),
				Actions: []Action{{Kind: ActionProgressingIgnored, Message: "Stage is Progressing; the latch holds"}},
			},
		},
		"Latched counts a Progressing flap once": {
			prior: latched(),
			obs:   with(stageAfterP1(HealthProgressing), func(o *Observation) { o.PreviousHealth = HealthProgressing }),
			now:   at(minutes(3)),
			want:  Result{Record: latched()},
		},
		"Latched stays on NotApplicable": {
			prior: latched(),
			obs:   stageAfterP1(HealthNotApplicable),
			now:   at(minutes(3)),
			want:  Result{Record: latched()},
		},
		"Latched and Unhealthy degrades": {
			prior: latched(),
			obs:   stageAfterP1(HealthUnhealthy),
			now:   at(minutes(3)),
			want: Result{
				Record:       degraded(minutes(3)),
				Actions:      []Action{{Kind: ActionDegraded, Message: "Stage health is Unhealthy after the latch"}},
				RequeueAfter: minutes(5),
			},
		},
		"Latched and missing health degrades": {
			prior: latched(),
			obs:   stageAfterP1(HealthMissing),
			now:   at(minutes(3)),
			want: Result{
				Record:       degraded(minutes(3)),
				Actions:      []Action{{Kind: ActionDegraded, Message: "Stage health is missing after the latch"}},
				RequeueAfter: minutes(5),
			},
		},
		"a zero grace fails at once": {
			settings: Settings{LatchDeadline: minutes(30)},
			prior:    latched(),
			obs:      stageAfterP1(HealthUnknown),
			now:      at(minutes(3)),
			want: Result{
				Record: failedAt(latched(), minutes(3), ReasonDegraded, "Stage health stayed Unknown for 0s after the latch"),
				Actions: []Action{
					{Kind: ActionDegraded, Message: "Stage health is Unknown after the latch"},
					{Kind: ActionFailed, Reason: ReasonDegraded, Message: "Stage health stayed Unknown for 0s after the latch"},
				},
			},
		},
		"Degraded and Healthy recovers": {
			prior: degraded(minutes(3)),
			obs:   stageAfterP1(HealthHealthy),
			now:   at(minutes(4)),
			want: Result{
				Record:  latched(),
				Actions: []Action{{Kind: ActionRecovered, Message: "Stage health is Healthy again"}},
			},
		},
		"Degraded and Progressing holds the grace": {
			prior: degraded(minutes(3)),
			obs:   stageAfterP1(HealthProgressing),
			now:   at(minutes(4)),
			want:  Result{Record: degraded(minutes(3)), RequeueAfter: minutes(4)},
		},
		"Degraded past the grace fails": {
			prior: degraded(minutes(3)),
			obs:   stageAfterP1(HealthUnhealthy),
			now:   at(minutes(8)),
			want: Result{
				Record:  failedAt(degraded(minutes(3)), minutes(8), ReasonDegraded, "Stage health stayed Unhealthy for 5m0s after the latch"),
				Actions: []Action{{Kind: ActionFailed, Reason: ReasonDegraded, Message: "Stage health stayed Unhealthy for 5m0s after the latch"}},
			},
		},
		"Degraded holds while a promotion runs, past the grace": {
			prior: degraded(minutes(3)),
			obs:   with(stageAfterP1(HealthUnknown), func(o *Observation) { o.PromotionRunning = true }),
			now:   at(minutes(20)),
			want:  Result{Record: degraded(minutes(3))},
		},
		"Latched holds on a health string Kargo does not define": {
			prior: latched(),
			obs:   with(stageAfterP1(HealthUnknown), func(o *Observation) { o.HealthInvalid = true }),
			now:   at(minutes(20)),
			want:  Result{Record: latched()},
		},
		"Promoted does not latch on an invalid health string and its deadline runs": {
			prior: promoted(),
			obs:   with(stageAfterP1(HealthUnknown), func(o *Observation) { o.HealthInvalid = true }),
			now:   at(minutes(2)),
			want:  Result{Record: promoted(), RequeueAfter: minutes(28)},
		},
		"Latched holds while a promotion runs": {
			prior: latched(),
			obs:   with(stageAfterP1(HealthUnknown), func(o *Observation) { o.PromotionRunning = true }),
			now:   at(minutes(20)),
			want:  Result{Record: latched()},
		},
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
		"a hotfix while Failed and paused starts a cycle and keeps the pauses": {
			prior: func() Record {
				r := failedAt(degraded(minutes(3)), minutes(8), ReasonDegraded, "x")
				r.Pauses = []string{"stage-degraded"}
				return r
			}(),
			obs: Observation{LastPromotion: promo("p2", PromotionSucceeded, minutes(20)), FreightID: "F2", Freight: "f-p2", Health: HealthHealthy, Pauses: []string{"stage-degraded"}},
			now: at(minutes(21)),
			want: Result{
				Record: func() Record {
					r := failedAt(degraded(minutes(3)), minutes(8), ReasonDegraded, "x")
					r.Pauses = []string{"stage-degraded"}
					r.Promotion, r.Freight, r.FreightID, r.ExaminedPromotion = "p2", "f-p2", "F2", "p2"
					r.Phase, r.PromotedAt, r.LatchedAt, r.Failure = PhaseLatched, ptr(minutes(20)), ptr(minutes(21)), nil
					v := VerificationRecord{Actor: Actor, StartTime: at(minutes(20)), FinishTime: at(minutes(21)), Phase: VerificationSuccessful, Message: "Stage became Healthy after promotion p2"}
					r.Verification, r.History = &v, append([]VerificationRecord{v}, r.History...)
					return r
				}(),
				Actions: []Action{
					{Kind: ActionCycleStarted, Message: "new cycle for promotion p2"},
					{Kind: ActionLatched, Message: "Stage became Healthy after promotion p2", TimeToLatch: minutes(1)},
				},
			},
		},
		"a failure with pause-on-failure names its pause and asks for it": {
			settings: Settings{LatchDeadline: minutes(30), DegradedGrace: minutes(5), PauseOnFailure: true},
			prior:    degraded(minutes(3)),
			obs:      with(stageAfterP1(HealthUnhealthy), func(o *Observation) { o.Stage = "prod" }),
			now:      at(minutes(8)),
			want: Result{
				Record: func() Record {
					r := failedAt(degraded(minutes(3)), minutes(8), ReasonDegraded, "Stage health stayed Unhealthy for 5m0s after the latch")
					r.Failure.Pause = "prod-degraded-42a3aacd"
					return r
				}(),
				Actions: []Action{
					{Kind: ActionFailed, Reason: ReasonDegraded, Message: "Stage health stayed Unhealthy for 5m0s after the latch"},
					{Kind: ActionCreatePause, Reason: ReasonDegraded, Message: "Stage health stayed Unhealthy for 5m0s after the latch", Pause: "prod-degraded-42a3aacd"},
				},
			},
		},
		"a failure's pause deleted before its record was stored is a resume": {
			settings: Settings{LatchDeadline: minutes(30), DegradedGrace: minutes(5), PauseOnFailure: true},
			prior:    degraded(minutes(3)),
			obs: with(stageAfterP1(HealthUnhealthy), func(o *Observation) {
				o.Stage, o.Deleted = "prod", []string{"prod-degraded-42a3aacd"}
			}),
			now: at(minutes(8)),
			want: Result{
				Record: func() Record {
					r := failedAt(degraded(minutes(3)), minutes(8), ReasonDegraded, "Stage health stayed Unhealthy for 5m0s after the latch")
					r.Failure.Pause = "prod-degraded-42a3aacd"
					return r
				}(),
				Actions: []Action{
					{Kind: ActionFailed, Reason: ReasonDegraded, Message: "Stage health stayed Unhealthy for 5m0s after the latch"},
					{Kind: ActionCreatePause, Reason: ReasonDegraded, Message: "Stage health stayed Unhealthy for 5m0s after the latch", Pause: "prod-degraded-42a3aacd"},
					{Kind: ActionResumed, Message: "the last StagePause covering the Stage is gone"},
				},
			},
		},
		"a deleted pause whose resume is recorded resumes nothing again": {
			settings: Settings{LatchDeadline: minutes(30), DegradedGrace: minutes(5), PauseOnFailure: true},
			prior: func() Record {
				r := failedAt(degraded(minutes(3)), minutes(8), ReasonDegraded, "x")
				r.Failure.Pause = "prod-degraded-42a3aacd"
				return r
			}(),
			obs: with(stageAfterP1(HealthUnhealthy), func(o *Observation) {
				o.Stage, o.Deleted = "prod", []string{"prod-degraded-42a3aacd"}
			}),
			now: at(minutes(9)),
			want: Result{Record: func() Record {
				r := failedAt(degraded(minutes(3)), minutes(8), ReasonDegraded, "x")
				r.Failure.Pause = "prod-degraded-42a3aacd"
				return r
			}()},
		},
		"a paused cycle not yet latched does not fail its deadline while Kargo is health-blind": {
			// The drain aborted the Pending auto-promotion: Kargo makes it
			// lastPromotion and stops judging health.
			prior: func() Record { r := promoted(); r.Pauses = []string{"p"}; return r }(),
			obs: Observation{LastPromotion: promo("p2", PromotionAborted, minutes(1)), FreightID: "F1", Freight: "f-p1",
				Health: HealthUnknown, Pauses: []string{"p"}},
			now:  at(minutes(45)),
			want: Result{Record: func() Record { r := promoted(); r.Pauses, r.ExaminedPromotion = []string{"p"}, "p2"; return r }()},
		},
		"a resume restarts the latch deadline of a cycle not yet latched": {
			prior: func() Record { r := promoted(); r.Pauses, r.ExaminedPromotion = []string{"p"}, "p2"; return r }(),
			obs: Observation{LastPromotion: promo("p2", PromotionAborted, minutes(1)), FreightID: "F1", Freight: "f-p1",
				Health: HealthUnknown},
			now: at(minutes(45)),
			want: Result{
				Record:       func() Record { r := promoted(); r.ExaminedPromotion, r.ResumedAt = "p2", ptr(minutes(45)); return r }(),
				Actions:      []Action{{Kind: ActionResumed, Message: "the last StagePause covering the Stage is gone"}},
				RequeueAfter: minutes(30),
			},
		},
		"the latch deadline counts from the resume": {
			prior: func() Record { r := promoted(); r.ExaminedPromotion, r.ResumedAt = "p2", ptr(minutes(45)); return r }(),
			obs: Observation{LastPromotion: promo("p2", PromotionAborted, minutes(1)), FreightID: "F1", Freight: "f-p1",
				Health: HealthUnknown},
			now: at(minutes(75)),
			want: Result{
				Record: func() Record {
					r := promoted()
					r.ExaminedPromotion, r.ResumedAt = "p2", ptr(minutes(45))
					return failedAt(r, minutes(75), ReasonLatchDeadlineExceeded, "Stage was not Healthy within 30m0s of promotion p1")
				}(),
				Actions: []Action{{Kind: ActionFailed, Reason: ReasonLatchDeadlineExceeded, Message: "Stage was not Healthy within 30m0s of promotion p1"}},
			},
		},
		"a pause appearing pauses the Stage": {
			prior: latched(),
			obs:   with(stageAfterP1(HealthHealthy), func(o *Observation) { o.Pauses = []string{"a", "b"} }),
			now:   at(minutes(4)),
			want: Result{
				Record: func() Record {
					r := latched()
					r.Pauses, r.PausedBy = []string{"a", "b"}, &PauseMark{Name: "a", At: at(minutes(4))}
					return r
				}(),
				Actions: []Action{{Kind: ActionPaused, Pause: "a", Message: "paused by StagePause a"}},
			},
		},
		"one of two pauses going keeps the Stage paused, and what paused it": {
			prior: func() Record {
				r := latched()
				r.Pauses, r.PausedBy = []string{"a", "b"}, &PauseMark{Name: "a", At: at(minutes(3))}
				return r
			}(),
			obs: with(stageAfterP1(HealthHealthy), func(o *Observation) { o.Pauses = []string{"b"} }),
			now: at(minutes(4)),
			want: Result{Record: func() Record {
				r := latched()
				r.Pauses, r.PausedBy = []string{"b"}, &PauseMark{Name: "a", At: at(minutes(3))}
				return r
			}()},
		},
		"the last pause going forgets what paused the Stage": {
			prior: func() Record {
				r := latched()
				r.Pauses, r.PausedBy = []string{"b"}, &PauseMark{Name: "a", At: at(minutes(3))}
				return r
			}(),
			obs: stageAfterP1(HealthHealthy),
			now: at(minutes(4)),
			want: Result{
				Record:  latched(),
				Actions: []Action{{Kind: ActionResumed, Message: "the last StagePause covering the Stage is gone"}},
			},
		},
		"the last pause going resumes the Stage": {
			prior: func() Record { r := latched(); r.Pauses = []string{"b"}; return r }(),
			obs:   stageAfterP1(HealthHealthy),
			now:   at(minutes(4)),
			want: Result{
				Record:  latched(),
				Actions: []Action{{Kind: ActionResumed, Message: "the last StagePause covering the Stage is gone"}},
			},
		},
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
