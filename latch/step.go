package latch

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Step advances one Stage's latch record by one observation. It is pure: the
// same arguments always give the same Result, and prior is not modified.
//
// A zero prior ("no record": a Stage never seen, or a record that was
// garbage) is a baseline. The machine records what it sees, counts
// deadlines from now, and reports no failure that happened before it looked,
// so that a first install or a lost record never pauses anything by itself
// (a Stage made, and failed, within the NewFailureWindow while no replica
// led is not a first install: see newFailure).
func Step(s Settings, prior Record, obs Observation, now time.Time) Result {
	m := machine{settings: s, obs: obs, now: now}
	if prior.IsZero() {
		m.baseline()
	} else {
		m.rec = prior.clone()
		m.examinePromotion()
		m.examineVerification()
	}
	m.judgeHealth()
	m.checkDeadlines()
	m.trackPauses(prior)
	m.markVerified(prior)
	return Result{Record: m.rec, Actions: m.actions, RequeueAfter: m.requeueAfter()}
}

type machine struct {
	settings Settings
	obs      Observation
	now      time.Time
	rec      Record
	actions  []Action
}

func (m *machine) act(a Action) { m.actions = append(m.actions, a) }

// healthJudged reports whether Kargo's health means anything now. While a
// promotion runs, or after one that did not succeed, Kargo reports Unknown by
// construction, so the phase holds; so it does for a health string Kargo
// does not define.
func (m *machine) healthJudged() bool {
	lp := m.obs.LastPromotion
	return lp != nil && lp.Phase == PromotionSucceeded && !m.obs.PromotionRunning && !m.obs.HealthInvalid
}

func (m *machine) baseline() {
	m.rec = Record{Phase: PhaseIdle}
	lp := m.obs.LastPromotion
	if lp != nil {
		m.rec.ExaminedPromotion = lp.Name
	}
	if v := m.obs.Verification; v.terminal() {
		m.rec.ExaminedVerification = v.ID
	}
	succeeded := lp != nil && lp.Phase == PromotionSucceeded
	if succeeded || m.obs.FreightID != "" {
		if !succeeded {
			lp = nil
		}
		m.beginCycle(lp)
		adopted := m.now
		m.rec.AdoptedAt = &adopted
	}
	// A failure that is already on the Stage when the operator first looks
	// is recorded, but it is not acted on: nobody saw it happen. Unless the
	// promotion failed just now: the Stage was made and failed while no
	// replica led, and that failure is as new as any.
	if reason, msg, ok := m.promotionFailure(m.obs.LastPromotion); ok && m.newFailure(m.obs.LastPromotion) {
		m.fail(reason, msg)
	} else if ok {
		m.markFailed(reason, msg+" (before kargo-latch watched this Stage)")
	} else if reason, msg, ok := verificationFailure(m.obs.Verification); ok {
		m.markFailed(reason, msg+" (before kargo-latch watched this Stage)")
	}
}

// newFailure reports whether a failed promotion found on a Stage without a
// record is new: the Stage was created, and the promotion finished, within
// the NewFailureWindow.
func (m *machine) newFailure(lp *Promotion) bool {
	w, created := m.settings.NewFailureWindow, m.obs.CreatedWithoutRecord
	return w > 0 && created != nil && m.now.Sub(*created) <= w && lp.FinishedAt != nil && m.now.Sub(*lp.FinishedAt) <= w
}

// examinePromotion starts a cycle on every new successful promotion and
// fails the cycle on a new failed one. A new cycle starts when
// freightHistory[0] moves, too: Kargo replays terminal Promotions in name
// order, so an older Promotion can succeed while lastPromotion stays a newer
// aborted one.
func (m *machine) examinePromotion() {
	lp := m.obs.LastPromotion
	isNew := lp != nil && lp.Name != m.rec.ExaminedPromotion
	if isNew {
		m.rec.ExaminedPromotion = lp.Name
	}
	freightMoved := m.obs.FreightID != "" && m.obs.FreightID != m.rec.FreightID
	switch {
	case isNew && lp.Phase == PromotionSucceeded:
		m.startCycle(lp)
	case freightMoved && m.awaitingOwnFreight():
		m.rec.FreightID, m.rec.Freight = m.obs.FreightID, firstNonEmpty(m.rec.Freight, m.obs.Freight)
	case freightMoved:
		m.startCycle(nil)
	}
	if !isNew {
		return
	}
	if reason, msg, ok := m.promotionFailure(lp); ok {
		m.fail(reason, msg)
	}
}

// awaitingOwnFreight is true when this cycle began with its promotion but
// Kargo had not yet moved freightHistory[0]; the move that follows belongs to
// the same cycle.
func (m *machine) awaitingOwnFreight() bool {
	lp := m.obs.LastPromotion
	return m.rec.Phase == PhasePromoted && m.rec.Promotion != "" &&
		lp != nil && lp.Name == m.rec.Promotion && lp.Phase == PromotionSucceeded
}

func (m *machine) promotionFailure(lp *Promotion) (FailureReason, string, bool) {
	if lp == nil {
		return "", "", false
	}
	switch lp.Phase {
	case PromotionFailed:
		return ReasonPromotionFailed, fmt.Sprintf("Promotion %s failed", lp.Name), true
	case PromotionErrored:
		return ReasonPromotionErrored, fmt.Sprintf("Promotion %s errored", lp.Name), true
	}
	return "", "", false
}

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
	if !v.terminal() {
		return "", "", false
	}
	switch {
	case v.Phase == VerificationFailed && v.Message == UserAbortMessage:
		return "", "", false
	case v.Phase == VerificationFailed:
		return ReasonVerificationFailed, withDetail("verification "+v.ID+" failed", v.Message), true
	case v.Phase == VerificationError:
		return ReasonVerificationError, withDetail("verification "+v.ID+" errored", v.Message), true
	}
	return "", "", false
}

func (m *machine) judgeHealth() {
	if !m.healthJudged() {
		return
	}
	h := m.obs.Health
	switch m.rec.Phase {
	case PhasePromoted:
		m.trackApps(&m.rec.AppsHealthy)
		switch {
		case h == HealthHealthy:
			m.latch(LatchedByStage)
		case m.everyApp(m.rec.AppsHealthy):
			m.latch(LatchedByApps)
		}
	case PhaseLatched:
		switch {
		case h == HealthProgressing:
			if m.obs.PreviousHealth != HealthProgressing {
				m.act(Action{Kind: ActionProgressingIgnored, Message: "Stage is Progressing; the latch holds"})
			}
		case h.keepsLatch():
		default:
			since := m.now
			m.rec.Phase, m.rec.DegradedSince, m.rec.AppsRecovered = PhaseDegraded, &since, nil
			m.act(Action{Kind: ActionDegraded, Message: fmt.Sprintf("Stage health is %s after the latch", describe(h))})
		}
	case PhaseDegraded:
		// A Stage recovers as it latched: Healthy as a whole, or every App
		// Healthy again, each at its own moment. Apps that flap out of
		// phase keep the Stage from ever being Healthy as a whole, and
		// without the second rule one blip would fail it past the grace.
		m.trackApps(&m.rec.AppsRecovered)
		switch {
		case h == HealthHealthy || h == HealthNotApplicable:
			m.recover(fmt.Sprintf("Stage health is %s again", h))
		case m.everyApp(m.rec.AppsRecovered):
			m.recover(fmt.Sprintf("every Application (%d) was Healthy again", len(m.obs.Apps)))
		}
	}
}

func (m *machine) recover(msg string) {
	m.rec.Phase, m.rec.DegradedSince, m.rec.AppsRecovered = PhaseLatched, nil, nil
	m.act(Action{Kind: ActionRecovered, Message: msg})
}

// appsJudged reports whether this observation may count Applications as
// Healthy: health is judged, and Kargo's aggregate is Healthy or merely
// Progressing. An aggregate Unhealthy or Unknown means Kargo found something
// wrong (a wrong revision, say) that an App's own status may not show. The
// output must have exactly one entry per health check the last promotion
// left: the Apps listed are then all that Kargo checks. No recorded checks
// (a Kargo that does not record them, or a Stage status written by hand)
// and more entries than checks both leave that unknown, so they fail
// closed: only the aggregate rule applies.
func (m *machine) appsJudged() bool {
	h := m.obs.Health
	return m.healthJudged() && (h == HealthHealthy || h == HealthProgressing) &&
		len(m.obs.Apps) > 0 && len(m.obs.Apps) <= MaxApps &&
		m.obs.HealthChecks > 0 && m.obs.HealthOutputs == m.obs.HealthChecks
}

// trackApps records in seen each Application seen Healthy and Synced, with
// the first time it was seen so.
func (m *machine) trackApps(seen *map[string]time.Time) {
	if !m.appsJudged() {
		return
	}
	// An App the Stage no longer lists no longer counts; forgetting it also
	// keeps the record within MaxApps however the list changes.
	for key := range *seen {
		if !slices.ContainsFunc(m.obs.Apps, func(a App) bool { return a.Key() == key }) {
			delete(*seen, key)
		}
	}
	for _, a := range m.obs.Apps {
		if !a.counts() {
			continue
		}
		if _, ok := (*seen)[a.Key()]; ok {
			continue
		}
		if *seen == nil {
			*seen = map[string]time.Time{}
		}
		(*seen)[a.Key()] = m.now
	}
}

// everyApp reports whether every Application listed now is in seen, each
// seen Healthy at its own moment: apps that flap out of phase are never
// Healthy together, yet each has shown that the promotion works.
func (m *machine) everyApp(seen map[string]time.Time) bool {
	if !m.appsJudged() {
		return false
	}
	for _, a := range m.obs.Apps {
		if _, ok := seen[a.Key()]; !ok {
			return false
		}
	}
	return true
}

func (m *machine) latch(by string) {
	at := m.now
	m.rec.Phase, m.rec.LatchedAt, m.rec.LatchedBy = PhaseLatched, &at, by
	if by == LatchedByStage {
		// The Apps' own times did not form this latch; the record, kept in
		// every replica's cache, stays small.
		m.rec.AppsHealthy = nil
	}
	msg := "Stage became Healthy after " + m.cycleName()
	if by == LatchedByApps {
		msg = fmt.Sprintf("every Application (%d) was Healthy after %s", len(m.obs.Apps), m.cycleName())
	}
	m.pushVerification(VerificationSuccessful, *m.rec.PromotedAt, msg)
	a := Action{Kind: ActionLatched, Message: msg}
	if m.rec.AdoptedAt == nil {
		a.TimeToLatch = max(0, m.now.Sub(*m.rec.PromotedAt))
	}
	m.act(a)
}

func (m *machine) checkDeadlines() {
	switch m.rec.Phase {
	case PhasePromoted:
		// Paused (as recorded before this observation: a pause this very
		// failure makes must not undo it), or resumed by this observation:
		// the deadline holds, and counts again from the resume (see
		// trackPauses).
		if len(m.rec.Pauses) > 0 {
			return
		}
		if d := m.settings.LatchDeadline; d > 0 && !m.now.Before(m.deadlineBase().Add(d)) {
			m.fail(ReasonLatchDeadlineExceeded, fmt.Sprintf("Stage was not Healthy within %s of %s", d, m.cycleName()))
		}
	case PhaseDegraded:
		if m.healthJudged() && !m.now.Before(m.rec.DegradedSince.Add(m.grace())) {
			m.fail(ReasonDegraded, fmt.Sprintf("Stage health stayed %s for %s after the latch", describe(m.obs.Health), m.grace()))
		}
	}
}

func (m *machine) requeueAfter() time.Duration {
	switch m.rec.Phase {
	case PhasePromoted:
		if d := m.settings.LatchDeadline; d > 0 && len(m.rec.Pauses) == 0 {
			return m.deadlineBase().Add(d).Sub(m.now)
		}
	case PhaseDegraded:
		if m.healthJudged() {
			return m.rec.DegradedSince.Add(m.grace()).Sub(m.now)
		}
	}
	return 0
}

func (m *machine) grace() time.Duration { return max(0, m.settings.DegradedGrace) }

// deadlineBase is when the latch deadline started counting: the promotion,
// or the moment the operator adopted a cycle it had not seen begin, or the
// last resume.
func (m *machine) deadlineBase() time.Time {
	base := *m.rec.PromotedAt
	for _, t := range []*time.Time{m.rec.AdoptedAt, m.rec.ResumedAt} {
		if t != nil && t.After(base) {
			base = *t
		}
	}
	return base
}

func (m *machine) startCycle(lp *Promotion) {
	m.beginCycle(lp)
	m.act(Action{Kind: ActionCycleStarted, Message: "new cycle for " + m.cycleName()})
}

// beginCycle resets the record for the promotion lp, or, when lp is nil, for
// a Freight change whose promotion Kargo did not report.
func (m *machine) beginCycle(lp *Promotion) {
	r := &m.rec
	r.Phase = PhasePromoted
	r.FreightID, r.Freight, r.Promotion = m.obs.FreightID, m.obs.Freight, ""
	at := m.now
	if lp != nil {
		r.Promotion, r.Freight = lp.Name, firstNonEmpty(lp.Freight, r.Freight)
		if lp.FinishedAt != nil {
			at = *lp.FinishedAt
		}
	}
	r.PromotedAt = &at
	r.AdoptedAt, r.ResumedAt, r.LatchedAt, r.DegradedSince, r.Failure, r.Verification = nil, nil, nil, nil, nil, nil
	r.LatchedBy, r.AppsHealthy, r.AppsRecovered, r.Marked = "", nil, nil, nil
}

// markVerified asks to mark the cycle's Freight verified in the Stage, as
// Kargo does in a pass that sees the Stage Healthy, so that the Freight
// flows downstream. It asks only when the latch is already stored (prior is
// Latched in this same cycle), so that verifiedAt is the stored latchedAt
// whatever happens to the mark; and once per cycle and Freight: the record
// names the Freight asked for, and the operator marks them before it stores
// the record.
func (m *machine) markVerified(prior Record) {
	if !m.obs.MayMark || prior.Phase != PhaseLatched || prior.Cycle() != m.rec.Cycle() {
		return
	}
	m.askMark()
}

// MarkDue reports whether the Freight of rec's cycle should be marked
// verified now, as far as obs shows: the operator then reads the Stage and
// its pauses from the API server and steps again with MayMark, so that a
// mark, which is never taken back, is never made from a stale view.
func MarkDue(s Settings, rec Record, obs Observation, now time.Time) bool {
	// Every sync asks; most Stages answer here, without a second Step.
	if !s.MarkVerified || rec.Phase != PhaseLatched {
		return false
	}
	obs.MayMark = true
	for _, a := range Step(s, rec, obs, now).Actions {
		if a.Kind == ActionMarkVerified {
			return true
		}
	}
	return false
}

func (m *machine) askMark() {
	if !m.settings.MarkVerified || !m.markable() {
		return
	}
	var todo []string
	for _, f := range m.obs.FreightNames {
		if f != "" && !slices.Contains(m.rec.Marked, f) {
			todo = append(todo, f)
		}
	}
	if len(todo) == 0 || len(m.rec.Marked)+len(todo) > MaxApps {
		return
	}
	m.rec.Marked = append(m.rec.Marked, todo...)
	why := "the Stage was Healthy"
	if m.rec.LatchedBy == LatchedByApps {
		why = "every Application was Healthy in this cycle"
	}
	m.act(Action{Kind: ActionMarkVerified, Freight: todo, VerifiedAt: *m.rec.LatchedAt,
		Message: fmt.Sprintf("%s latched (%s)", m.cycleName(), why)})
}

// markable reports whether the cycle may count as verified now: it is
// Latched (not Degraded, not Failed) in a pass where Kargo judges health, the
// observation is of the cycle's own Freight, no pause covers the Stage (a
// person who stopped the line here also stops what flows out), and a
// configured verification has succeeded: kargo-latch never replaces a
// verification, it only gives a successful one the Healthy pass Kargo needs.
func (m *machine) markable() bool {
	if m.rec.Phase != PhaseLatched || m.rec.LatchedAt == nil || !m.healthJudged() ||
		len(m.obs.Pauses) > 0 || m.obs.FreightID == "" || m.obs.FreightID != m.rec.FreightID {
		return false
	}
	// The promotion's own Freight must be the one Kargo shows: right after
	// a promotion, freightHistory[0] may still be the previous Freight's.
	if lp := m.obs.LastPromotion; lp.Freight != "" && !slices.Contains(m.obs.FreightNames, lp.Freight) {
		return false
	}
	if m.obs.HasVerification {
		v := m.obs.Verification
		return v != nil && v.Phase == VerificationSuccessful
	}
	return true
}

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

func (m *machine) cycleName() string {
	switch {
	case m.rec.Promotion != "":
		return "promotion " + m.rec.Promotion
	case m.rec.Freight != "":
		return "freight " + m.rec.Freight
	}
	return "the current freight"
}

// recordID derives a stable ID, so that the same judgement always yields the
// same record and a replayed Step writes nothing new.
func recordID(freightID, promotion string, phase VerificationPhase, at time.Time) string {
	sum := sha256.Sum256([]byte(freightID + "\x00" + promotion + "\x00" + string(phase) + "\x00" + at.UTC().Format(time.RFC3339Nano)))
	return hex.EncodeToString(sum[:8])
}

func describe(h Health) string {
	if h == HealthMissing {
		return "missing"
	}
	return string(h)
}

// MaxMessage bounds each message the record keeps. Kargo's verification
// messages can be an AnalysisRun's whole error output (100 KB and more);
// copied into the failure, the verification and the history unbounded, the
// record would outgrow what the API server accepts in an annotation and
// never be stored, and the failure would go unnoticed.
const MaxMessage = 1024

func withDetail(s, detail string) string {
	if detail == "" {
		return s
	}
	return s + ": " + detail
}

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

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
