package latch

// stepHealthCases are TestStep's cases of the health after the latch:
// flaps, degradation and its grace, health strings Kargo does not define.
func stepHealthCases() map[string]stepCase {
	return map[string]stepCase{
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
	}
}
