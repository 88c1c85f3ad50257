package latch

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

func TestHistoryKeepsTheNewestTen(t *testing.T) {
	r := promoted()
	now := at(0)
	for i := range 12 {
		now = now.Add(time.Minute)
		r = Step(defaults(), r, stageAfterP1(HealthHealthy), now).Record
		now = now.Add(time.Minute)
		res := Step(Settings{LatchDeadline: minutes(30)}, r, stageAfterP1(HealthUnhealthy), now)
		r = res.Record
		// Start the next cycle with a new promotion.
		next := Observation{LastPromotion: promo(string(rune('a'+i)), PromotionSucceeded, 0), FreightID: string(rune('A' + i))}
		r = Step(defaults(), r, next, now).Record
		r.PromotedAt = ptrTime(now)
	}
	if len(r.History) != HistoryLimit {
		t.Fatalf("history has %d records, want %d", len(r.History), HistoryLimit)
	}
	for i := 1; i < len(r.History); i++ {
		if r.History[i].FinishTime.After(r.History[i-1].FinishTime) {
			t.Errorf("history[%d] finished after history[%d]: not newest first", i, i-1)
		}
	}
}

func TestRecordIDsAreStableAndDistinct(t *testing.T) {
	a := Step(defaults(), promoted(), stageAfterP1(HealthHealthy), at(minutes(2)))
	b := Step(defaults(), promoted(), stageAfterP1(HealthHealthy), at(minutes(2)))
	c := Step(defaults(), promoted(), stageAfterP1(HealthHealthy), at(minutes(3)))
	if a.Record.Verification.ID == "" || a.Record.Verification.ID != b.Record.Verification.ID {
		t.Errorf("same judgement gave IDs %q and %q, want one non-empty ID", a.Record.Verification.ID, b.Record.Verification.ID)
	}
	if a.Record.Verification.ID == c.Record.Verification.ID {
		t.Errorf("different judgements share ID %q", a.Record.Verification.ID)
	}
}

// A verification failure with an AnalysisRun's whole output as its message
// still fails the cycle, once, and the record stays small enough to store.
func TestLongVerificationMessageStillFails(t *testing.T) {
	s := defaults()
	s.PauseOnFailure = true
	long := strings.Repeat("error: metric \"success-rate\" assessed Failed ⚠ ", 2500) // ~100 KB, multi-byte runes
	rec := latched()
	for i := range HistoryLimit + 2 {
		obs := with(stageAfterP1(HealthHealthy), func(o *Observation) {
			o.Stage = "prod"
			o.LastPromotion = promo(fmt.Sprint("p", i+2), PromotionSucceeded, minutes(i))
			o.FreightID = fmt.Sprint("F", i+2)
			o.Verification = &Verification{ID: fmt.Sprint("v", i), Phase: VerificationFailed, Message: long}
		})
		res := Step(s, rec, obs, at(minutes(i+1)))
		if res.Record.Phase != PhaseFailed || !hasAction(res, ActionCreatePause) {
			t.Fatalf("cycle %d: phase %s, actions %+v; want Failed with one pause", i, res.Record.Phase, res.Actions)
		}
		rec = res.Record
	}
	enc := rec.Encode()
	if len(enc) > 32*1024 {
		t.Errorf("record is %d bytes with long messages, want at most 32 KiB", len(enc))
	}
	if !utf8.ValidString(enc) {
		t.Error("truncation split a rune")
	}
	if m := rec.Failure.Message; len(m) > MaxMessage || !strings.HasSuffix(m, "(truncated)") {
		t.Errorf("failure message is %d bytes, ends %q", len(m), m[max(0, len(m)-20):])
	}
}
