package latch

// stepPauseCases are TestStep's cases of pauses: a failure's pause,
// pauses appearing and going, resumes and the deadline after them.
func stepPauseCases() map[string]stepCase {
	return map[string]stepCase{
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
}
