package cli

import (
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// condition is what wait waits for (--for).
type condition string

const (
	forLatched  condition = "latched"
	forPaused   condition = "paused"
	forResumed  condition = "resumed"
	forVerified condition = "verified"
)

var conditions = []string{string(forLatched), string(forPaused), string(forResumed), string(forVerified)}

// ofCycle reports whether the condition is about a promotion's cycle,
// rather than about the Stage's pauses.
func (c condition) ofCycle() bool { return c == forLatched || c == forVerified }

// outcome is where a wait stands.
type outcome int

const (
	waiting outcome = iota
	reached
	failed
	// held: resumed, but Kargo's own auto-promotion hold still stops
	// auto-promotion (ExitHeld).
	held
	// analysisFailed: waiting for verified, the cycle's configured
	// verification ended Failed, Error or Inconclusive (ExitAnalysisFailed).
	analysisFailed
)

// verdict is one judgement: the outcome, and for people what was reached,
// why it failed, or what it waits for now.
type verdict struct {
	outcome outcome
	message string
}

// Promotion phases, as Kargo writes them.
const (
	promotionPending   = "Pending"
	promotionRunning   = "Running"
	promotionSucceeded = "Succeeded"
	promotionFailed    = "Failed"
	promotionErrored   = "Errored"
	promotionAborted   = "Aborted"
)

// promotion is what wait reads of a Promotion object.
type promotion struct {
	Name, Stage, Freight string
	// Target is spec.target: a Promotion of a target-aware Stage, which
	// Kargo leaves out of its holds.
	Target string
	// Phase is status.phase; empty until Kargo has seen the Promotion,
	// which is Pending to Kargo.
	Phase   string
	Message string
	// Hold and Resume are the origin keys of the intent Kargo's webhook
	// stamped on a person's Promotion; empty when none.
	Hold, Resume string
}

func promotionOf(u *unstructured.Unstructured) promotion {
	str := func(path ...string) string {
		s, _, _ := unstructured.NestedString(u.Object, path...)
		return s
	}
	a := u.GetAnnotations()
	return promotion{Name: u.GetName(), Stage: str("spec", "stage"), Freight: str("spec", "freight"), Target: str("spec", "target"),
		Phase: str("status", "phase"), Message: str("status", "message"),
		Hold: a[kargo.HoldIntentAnnotation], Resume: a[kargo.ResumeIntentAnnotation]}
}

// sighting is what wait has seen: the inputs of judge.
type sighting struct {
	// stage is nil once the Stage is gone.
	stage  *unstructured.Unstructured
	pauses []v1alpha1.StagePause
	// promotion is the Promotion object wait is pinned to, nil when it is
	// not seen (not yet, gone, or not allowed to be read).
	promotion *promotion
	// promotions are the Stage's Promotion objects, for a wait for
	// resumed: their intents tell a hold Kargo has yet to show or drop.
	promotions []promotion
	// verifiedIn reports whether a Freight's status.verifiedIn has the
	// Stage, and its verifiedAt (nil when absent); nil when Freight are not
	// read.
	verifiedIn func(freight string) (verifiedAt *time.Time, ok bool)
}

// judge decides where a wait for cond stands. target is the promotion whose
// cycle a wait for latched or verified is pinned to; empty, it follows the
// Stage's current cycle, whichever it is.
func judge(cond condition, target string, s sighting) verdict {
	if s.stage == nil {
		return verdict{failed, "the Stage was deleted"}
	}
	if !cond.ofCycle() {
		return judgePause(cond, s)
	}
	rec, err := latch.Decode(s.stage.GetAnnotations()[kargo.StateAnnotation])
	if err != nil {
		// The operator replaces an invalid record with a new one.
		return verdict{waiting, "the latch record is not valid: " + err.Error()}
	}
	st := kargo.StatusFromUnstructured(s.stage)
	if st == nil {
		st = &kargo.StageStatus{}
	}
	if target != "" && !isCycleOf(target, rec, st, s.promotion) {
		return judgeOtherCycle(target, rec, st, s.promotion)
	}
	name := cycleName(target, rec)
	switch rec.Phase {
	case latch.PhaseFailed:
		if cond == forVerified && analysisFailure(rec.Failure) {
			return verdict{analysisFailed, fmt.Sprintf("%s failed: its verification did not pass: %s", name, failure(rec))}
		}
		return verdict{failed, fmt.Sprintf("%s failed: %s", name, failure(rec))}
	case "", latch.PhaseIdle:
		return verdict{waiting, "the Stage has no promotion yet"}
	}
	if cond == forVerified {
		return judgeVerifiedCycle(name, rec, st, cycleAnalysis(s.stage, &rec, st), s.verifiedIn)
	}
	if rec.Phase == latch.PhaseLatched {
		return verdict{reached, fmt.Sprintf("%s latched %s", name, when(rec.LatchedAt))}
	}
	return verdict{waiting, fmt.Sprintf("%s is %s", name, progress(rec, st))}
}

// isCycleOf reports whether the record's cycle is the target promotion's.
// A cycle that began with a Freight change, its promotion unnamed (Kargo's
// replay order: see latch.Record.Promotion), is the target's when it holds
// the target's Freight.
func isCycleOf(target string, rec latch.Record, st *kargo.StageStatus, p *promotion) bool {
	if rec.IsZero() || rec.Phase == latch.PhaseIdle {
		return false
	}
	if rec.Promotion != "" {
		return rec.Promotion == target
	}
	freight := ""
	if p != nil && p.Name == target {
		freight = p.Freight
	} else if lp := st.LastPromotion; lp != nil && lp.Name == target {
		freight = lp.Freight
	}
	return freight != "" && rec.Freight == freight
}

// judgeOtherCycle judges a wait whose target promotion's cycle is not the
// record's: the promotion has not finished, failed, or was overtaken.
func judgeOtherCycle(target string, rec latch.Record, st *kargo.StageStatus, p *promotion) verdict {
	phase, message := promotionPhase(target, st, p)
	switch phase {
	case promotionFailed, promotionErrored:
		return verdict{failed, withMessage(fmt.Sprintf("promotion %s %s", target, phase), message)}
	case promotionAborted:
		return verdict{failed, withMessage(fmt.Sprintf("promotion %s was aborted", target), message)}
	case promotionPending, promotionRunning:
		return verdict{waiting, fmt.Sprintf("promotion %s is %s", target, phase)}
	}
	// Kargo names Promotions <stage>.<ULID>.<freight> and runs a Stage's
	// Promotions in name order: a record of a later-named promotion means
	// that the target's cycle, if it ever began, is over.
	if rec.Promotion > target {
		return verdict{failed, fmt.Sprintf("the cycle of promotion %s is over: the newer promotion %s has started its own", target, rec.Promotion)}
	}
	if phase == promotionSucceeded {
		return verdict{waiting, fmt.Sprintf("promotion %s succeeded; waiting for kargo-latch to start its cycle", target)}
	}
	return verdict{waiting, fmt.Sprintf("waiting for promotion %s", target)}
}

// promotionPhase is the target promotion's phase as far as anything shows
// it, and Kargo's message: a terminal phase from either the Promotion or the
// Stage wins, as either may be seen first.
func promotionPhase(target string, st *kargo.StageStatus, p *promotion) (phase, message string) {
	if p != nil && p.Name == target {
		phase, message = p.Phase, p.Message
		if phase == "" {
			phase = promotionPending
		}
	}
	if terminal(phase) {
		return phase, message
	}
	if lp := st.LastPromotion; lp != nil && lp.Name == target && terminal(lp.Phase) {
		return lp.Phase, ""
	}
	if st.CurrentPromotion == target {
		return promotionRunning, ""
	}
	return phase, message
}

func terminal(phase string) bool {
	switch phase {
	case promotionSucceeded, promotionFailed, promotionErrored, promotionAborted:
		return true
	}
	return false
}

func judgePause(cond condition, s sighting) verdict {
	pauses := covering(s.stage.GetNamespace(), s.stage.GetName(), s.pauses)
	var names []string
	for _, p := range pauses {
		names = append(names, p.Name)
	}
	holds := kargoHoldsOf(s.stage)
	switch {
	case len(pauses) == 0 && cond == forResumed:
		if pending := pendingIntent(s.stage, holds, s.promotions); pending != "" {
			return verdict{waiting, "the Stage is not paused; " + pending}
		}
		if len(holds) > 0 {
			return verdict{held, "the Stage is not paused, but " + holdsSentence(s.stage, holds)}
		}
		return verdict{reached, "the Stage is not paused"}
	case len(pauses) == 0:
		return verdict{waiting, "the Stage is not paused"}
	}
	paused := fmt.Sprintf("the Stage is paused by StagePause %s (reason %s)", strings.Join(names, ", "), pauses[0].EffectiveReason())
	if cond == forPaused {
		return verdict{reached, paused}
	}
	if len(holds) > 0 {
		paused += "; " + holdsSentence(s.stage, holds)
	}
	return verdict{waiting, paused}
}

// kargoHoldsOf are Kargo's own auto-promotion holds on the Stage.
func kargoHoldsOf(u *unstructured.Unstructured) []kargo.AutoPromotionHold {
	if st := kargo.StatusFromUnstructured(u); st != nil {
		return st.Holds
	}
	return nil
}

// holdsSentence says, for people, that Kargo holds auto-promotion of the
// Stage and how to release it, as the StageResumed Event does (which puts
// the release first and names at most a few holds, to fit an Event).
func holdsSentence(u *unstructured.Unstructured, holds []kargo.AutoPromotionHold) string {
	held := make([]string, len(holds))
	for i, h := range holds {
		held[i] = h.Describe()
	}
	return fmt.Sprintf("Kargo itself still holds auto-promotion from %s: to release it, %s",
		strings.Join(held, "; "), kargo.HoldRelease(u.GetNamespace(), u.GetName()))
}

func cycleName(target string, rec latch.Record) string {
	switch {
	case target != "":
		return "the cycle of promotion " + target
	case rec.Promotion != "":
		return "the current cycle (promotion " + rec.Promotion + ")"
	case rec.Freight != "":
		return "the current cycle (Freight " + rec.Freight + ")"
	}
	return "the current cycle"
}

func failure(rec latch.Record) string {
	if rec.Failure == nil {
		return "no reason recorded"
	}
	return withMessage(string(rec.Failure.Reason), rec.Failure.Message)
}

// progress says where a cycle that has not reached the condition is.
func progress(rec latch.Record, st *kargo.StageStatus) string {
	switch rec.Phase {
	case latch.PhasePromoted:
		s := "Promoted, waiting for the latch"
		if n := len(st.Apps); n > 0 && n <= latch.MaxApps {
			seen := len(appStatusesSeen(st.Apps, rec.AppsHealthy))
			s += fmt.Sprintf(" (%d/%d Applications seen Healthy)", seen, n)
		}
		return s
	case latch.PhaseDegraded:
		return "Degraded " + when(rec.DegradedSince) + ", waiting for it to recover"
	case latch.PhaseLatched:
		return "Latched " + when(rec.LatchedAt) + "; its Freight is not verified in the Stage yet"
	}
	return string(rec.Phase)
}

// appStatusesSeen are the Applications listed now that were seen Healthy.
func appStatusesSeen(listed []latch.App, seen map[string]time.Time) []string {
	var out []string
	for _, a := range listed {
		if _, ok := seen[a.Key()]; ok {
			out = append(out, a.Key())
		}
	}
	return out
}

// when is an absolute time: a wait's messages change only when the Stage
// does.
func when(t *time.Time) string {
	if t == nil {
		return ""
	}
	return "at " + t.UTC().Format(time.RFC3339)
}

func withMessage(s, message string) string {
	if message == "" {
		return s
	}
	return s + ": " + message
}
