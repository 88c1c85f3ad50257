package latch

import (
	"crypto/sha256"
	"encoding/hex"
	"time"
)

func (m *machine) examineVerification() {
	v := m.obs.Verification
	if !v.terminal() || v.ID == m.rec.ExaminedVerification {
		return
	}
	m.rec.ExaminedVerification = v.ID
	if reason, msg, ok := verificationFailure(v); ok {
		m.fail(reason, msg)
	}
}

func verificationFailure(v *Verification) (FailureReason, string, bool) {
	reason, ok := verificationFailureReason(v)
	if !ok {
		return "", "", false
	}
	outcome := "failed"
	if reason == ReasonVerificationError {
		outcome = "errored"
	}
	return reason, withDetail("verification "+v.ID+" "+outcome, v.Message), true
}

// verificationFailureReason is why Kargo's verification v fails the cycle,
// if it does (not one a person aborted): the judgement without the message.
func verificationFailureReason(v *Verification) (FailureReason, bool) {
	if !v.terminal() {
		return "", false
	}
	switch {
	case v.Phase == VerificationFailed && v.Message == UserAbortMessage:
		return "", false
	case v.Phase == VerificationFailed:
		return ReasonVerificationFailed, true
	case v.Phase == VerificationError:
		return ReasonVerificationError, true
	}
	return "", false
}

func (m *machine) pushVerification(phase VerificationPhase, start time.Time, msg string) {
	v := VerificationRecord{
		ID:         recordID(m.rec.FreightID, m.rec.Promotion, phase, m.now),
		Actor:      Actor,
		StartTime:  start,
		FinishTime: m.now,
		Phase:      phase,
		Message:    bounded(msg),
	}
	m.rec.Verification = &v
	m.rec.History = append([]VerificationRecord{v}, m.rec.History...)
	if len(m.rec.History) > HistoryLimit {
		m.rec.History = m.rec.History[:HistoryLimit]
	}
	// Records written before messages were bounded are bounded as they
	// pass through.
	for i := range m.rec.History {
		m.rec.History[i].Message = bounded(m.rec.History[i].Message)
	}
}

// recordID derives a stable ID, so that the same judgement always yields the
// same record and a replayed Step writes nothing new.
func recordID(freightID, promotion string, phase VerificationPhase, at time.Time) string {
	sum := sha256.Sum256([]byte(freightID + "\x00" + promotion + "\x00" + string(phase) + "\x00" + at.UTC().Format(time.RFC3339Nano)))
	return hex.EncodeToString(sum[:8])
}

func withDetail(s, detail string) string {
	if detail == "" {
		return s
	}
	return s + ": " + detail
}
