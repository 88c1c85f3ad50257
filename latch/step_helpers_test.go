package latch

import "time"

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time   { return t0.Add(d) }
func ptr(d time.Duration) *time.Time { t := at(d); return &t }
func ptrTime(t time.Time) *time.Time { return &t }
func minutes(n int) time.Duration    { return time.Duration(n) * time.Minute }
func defaults() Settings             { return Settings{LatchDeadline: minutes(30), DegradedGrace: minutes(5)} }
func promo(name string, p PromotionPhase, finished time.Duration) *Promotion {
	return &Promotion{Name: name, Phase: p, FinishedAt: ptr(finished), Freight: "f-" + name}
}

// promoted is the record of a cycle for promotion p1 (freight F1) that
// finished at t0.
func promoted() Record {
	return Record{
		Promotion: "p1", Freight: "f-p1", FreightID: "F1", Phase: PhasePromoted,
		PromotedAt: ptr(0), ExaminedPromotion: "p1",
	}
}

func latched() Record {
	r := promoted()
	r.Phase, r.LatchedAt, r.LatchedBy = PhaseLatched, ptr(minutes(2)), LatchedByStage
	v := VerificationRecord{Actor: Actor, StartTime: at(0), FinishTime: at(minutes(2)), Phase: VerificationSuccessful, Message: "Stage became Healthy after promotion p1"}
	r.Verification, r.History = &v, []VerificationRecord{v}
	return r
}

func degraded(since time.Duration) Record {
	r := latched()
	r.Phase, r.DegradedSince = PhaseDegraded, ptr(since)
	return r
}

// failedAt turns r into the record of a failure judged at d.
func failedAt(r Record, d time.Duration, reason FailureReason, msg string) Record {
	r = r.clone()
	start := at(d)
	if r.PromotedAt != nil {
		start = *r.PromotedAt
	}
	v := VerificationRecord{Actor: Actor, StartTime: start, FinishTime: at(d), Phase: VerificationFailed, Message: msg}
	r.Phase, r.DegradedSince = PhaseFailed, nil
	r.Failure = &Failure{Reason: reason, Message: msg, At: at(d)}
	r.Verification, r.History = &v, append([]VerificationRecord{v}, r.History...)
	return r
}

// failedVerification is a verification that failed, which some cases of
// TestStep observe.
var failedVerification = &Verification{ID: "v1", Phase: VerificationFailed, Message: "analysis failed"}

// stageAfterP1 is what Kargo shows after p1 succeeded, with the given health.
func stageAfterP1(h Health) Observation {
	return Observation{LastPromotion: promo("p1", PromotionSucceeded, 0), FreightID: "F1", Freight: "f-p1", Health: h}
}

func with(o Observation, edit func(*Observation)) Observation { edit(&o); return o }
