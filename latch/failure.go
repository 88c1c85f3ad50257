package latch

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"unicode/utf8"
)

// fail ends the cycle. A cycle fails once; later failures add nothing.
// With pause-on-failure, the failure names its pause in the record and asks
// for it; the record, once stored, is what makes that happen only once.
func (m *machine) fail(reason FailureReason, msg string) {
	if m.rec.Phase == PhaseFailed {
		return
	}
	msg = bounded(msg)
	m.markFailed(reason, msg)
	m.act(Action{Kind: ActionFailed, Reason: reason, Message: msg})
	if m.settings.PauseOnFailure && m.obs.Stage != "" {
		name := m.pauseName(reason)
		if made, ok := m.obs.PausesMadeAs[name]; ok {
			name = made
		}
		m.rec.Failure.Pause = name
		m.act(Action{Kind: ActionCreatePause, Reason: reason, Message: msg, Pause: name})
	}
}

// pauseName derives the name of a failure's StagePause from what identifies
// the failure: the Stage, the reason, and the failed promotion or the cycle.
// It does not depend on the time, so a failure judged again after a crash
// asks for the same pause.
func (m *machine) pauseName(reason FailureReason) string {
	subject := m.rec.Promotion + "\x00" + m.rec.FreightID
	if reason == ReasonPromotionFailed || reason == ReasonPromotionErrored {
		subject = m.rec.ExaminedPromotion
	}
	sum := sha256.Sum256([]byte(m.obs.Stage + "\x00" + string(reason) + "\x00" + subject))
	suffix := "-" + strings.ToLower(string(reason)) + "-" + hex.EncodeToString(sum[:4])
	const maxName = 253
	stage := m.obs.Stage
	if len(stage)+len(suffix) > maxName {
		stage = strings.TrimRight(stage[:maxName-len(suffix)], ".-")
	}
	return stage + suffix
}

// trackPauses mirrors the covering pauses into the record, and reports the
// Stage becoming paused or resumed. A deleted pause the record has never
// seen (the store that would have named it failed, then someone deleted it)
// covered the Stage all the same: its deletion is a resume too.
func (m *machine) trackPauses(prior Record) {
	unrecorded := slices.ContainsFunc(m.obs.Deleted, func(d string) bool {
		return !slices.Contains(prior.Pauses, d) && (prior.Failure == nil || prior.Failure.Pause != d)
	})
	m.rec.Pauses = nil
	if len(m.obs.Pauses) > 0 {
		m.rec.Pauses = append([]string(nil), m.obs.Pauses...)
	}
	switch {
	case len(prior.Pauses) == 0 && len(m.rec.Pauses) > 0:
		by := m.rec.Pauses[0]
		m.rec.PausedBy = &PauseMark{Name: by, UID: m.obs.PauseUIDs[by], At: m.now}
		m.act(Action{Kind: ActionPaused, Pause: m.rec.Pauses[0], Message: "paused by StagePause " + m.rec.Pauses[0]})
	case (len(prior.Pauses) > 0 || unrecorded) && len(m.rec.Pauses) == 0:
		m.act(Action{Kind: ActionResumed, Message: "the last StagePause covering the Stage is gone"})
		if m.rec.Phase == PhasePromoted {
			now := m.now
			m.rec.ResumedAt = &now
		}
	}
	if len(m.rec.Pauses) == 0 {
		m.rec.PausedBy = nil
	}
}

func (m *machine) markFailed(reason FailureReason, msg string) {
	msg = bounded(msg)
	start := m.now
	if m.rec.PromotedAt != nil {
		start = *m.rec.PromotedAt
	}
	m.rec.Phase, m.rec.DegradedSince = PhaseFailed, nil
	m.rec.Failure = &Failure{Reason: reason, Message: msg, At: m.now}
	m.pushVerification(VerificationFailed, start, msg)
}

// MaxMessage bounds each message the record keeps. Kargo's verification
// messages can be an AnalysisRun's whole error output (100 KB and more);
// copied into the failure, the verification and the history unbounded, the
// record would outgrow what the API server accepts in an annotation and
// never be stored, and the failure would go unnoticed.
const MaxMessage = 1024

// bounded cuts msg to at most MaxMessage bytes, on a UTF-8 boundary, and
// says that it did.
func bounded(msg string) string {
	if len(msg) <= MaxMessage {
		return msg
	}
	const cut = " … (truncated)"
	end := MaxMessage - len(cut)
	for end > 0 && !utf8.RuneStart(msg[end]) {
		end--
	}
	return msg[:end] + cut
}

// FailsCycle reports whether a last promotion in phase p fails its cycle
// (as promotionFailure judges it).
func (p PromotionPhase) FailsCycle() bool {
	_, fails := promotionFailureReason(p)
	return fails
}

// FailsCycle reports whether Kargo's verification v fails the cycle (as
// examineVerification judges it): not one a person aborted.
func (v *Verification) FailsCycle() bool {
	_, fails := verificationFailureReason(v)
	return fails
}

// FailsRun reports whether a run kargo-latch started, ending in phase p,
// fails its cycle (as the analysis's result is judged).
func (p VerificationPhase) FailsRun() bool {
	_, fails := analysisFailure(p)
	return fails
}

// Bounded is bounded for the operator's own copies of the machine's
// messages (an annotation on an AnalysisRun, say).
func Bounded(msg string) string { return bounded(msg) }
