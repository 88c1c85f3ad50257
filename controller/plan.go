package controller

import (
	"time"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/controller/pausing"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// plan is what one sync must do, judged from a snapshot, as data: the
// executor (execute.go) carries it out in the order its fields are listed
// (what is beside the store runs with it), which is the order that survives
// a crash at any point (see syncStage).
type plan struct {
	// result is the machine's step: the record to store, the actions to
	// report, and when to look again.
	result latch.Result

	// createPauses are the failure's StagePauses, made first (or found
	// made): a pause must not wait on the Stage's store, nor be lost if the
	// sync stops after it. In --dry-run they are reported instead
	// (dryRunPauses).
	createPauses []latch.Action
	dryRunPauses []latch.Action
	// startRun is the cycle's AnalysisRun to make (verify-on-latch), made
	// after the pauses and before the record that names it is stored.
	startRun *latch.Action

	// write is the one conditional patch of the Stage's metadata: record,
	// paused label, refresh request; nil when the Stage is as it should be.
	write *stageWrite
	// Beside the store: the StagePaused Event, the drain of queued
	// auto-promotions (drainOwedGone: the pause a failed live drain was
	// owed to is gone), and the live reads a mark rests on.
	announce      *announcement
	drain         *pausing.DrainPlan
	drainOwedGone bool

	// release are held pauses to let go once the record that shows their
	// resume is stored.
	release []*v1alpha1.StagePause
	// endRuns are kargo-latch's runs that no live cycle needs: cut short
	// (out of Kargo's lookup) or terminated, once the record that says why
	// is stored.
	endRuns []latch.Action
	// mark are the Freight whose mark is due once the latch is stored
	// (their reads start beside the store).
	mark []string
}

// judge decides what a sync must do. It is pure: it reads the snapshot,
// the memo included, and changes nothing.
func judge(s *snapshot) plan {
	if s.leftAlone {
		// This version cannot tell whether that record shows a resume; it
		// will never judge the Stage, so it holds none of its pauses.
		return plan{release: s.held}
	}
	res := latch.Step(s.settings, s.prior, s.obs, s.now)
	p := plan{result: res, release: s.held}
	for _, a := range res.Actions {
		switch {
		case a.Kind == latch.ActionCutShortRun || a.Kind == latch.ActionTerminateRun:
			p.endRuns = append(p.endRuns, a)
		case a.Kind == latch.ActionStartVerification && !s.dryRun:
			p.startRun = &a
		case a.Kind != latch.ActionCreatePause:
		case s.dryRun:
			p.dryRunPauses = append(p.dryRunPauses, a)
		default:
			p.createPauses = append(p.createPauses, a)
		}
	}
	p.write = stageWriteFor(s, res)
	p.announce = owedAnnouncement(s, res)
	p.drain, p.drainOwedGone = pausing.DrainOwed(s.settings, s.pauses, res, s.memo.liveDrainOwed, s.promotions)
	if s.memo.mark.MayTry(res.Record.Cycle(), s.now) && latch.MarkDue(s.settings, res.Record, s.obs, s.now) {
		p.mark = s.obs.FreightNames
	}
	return p
}

// stageWrite is the store's patch of the Stage's metadata (nil values
// remove keys), and what it means.
type stageWrite struct {
	annotations map[string]any
	labels      map[string]any
	record      latch.Record
	encoded     string // the record as written
	// keepsGarbage: the patch keeps a garbage record beside the fresh one
	// (a person may mend it from there); a refusal for size drops it.
	keepsGarbage bool
	// restoresLabel: it puts back a paused label someone removed.
	restoresLabel bool
}

// stageWriteFor computes the patch that makes the Stage show res: whatever
// of the record annotation, the paused label and, on resume, a Kargo
// refresh request differs from the Stage. Nil when nothing does.
func stageWriteFor(s *snapshot, res latch.Result) *stageWrite {
	w := &stageWrite{annotations: map[string]any{}, labels: map[string]any{}, record: res.Record, encoded: res.Record.Encode()}
	if w.encoded != s.value {
		w.annotations[api.StateAnnotation] = w.encoded
		if s.garbage {
			// A garbage record (priorRecord) is not simply overwritten. A
			// newer version's record is never replaced (leftAlone).
			w.annotations[kargo.InvalidStateAnnotation], _ = keptGarbage(s.value)
			w.keepsGarbage = true
		}
	}
	wantPaused := len(res.Record.Pauses) > 0
	if hasPaused := s.stage.Labels[api.PausedLabel] == "true"; hasPaused != wantPaused {
		if wantPaused {
			w.labels[api.PausedLabel] = "true"
			w.restoresLabel = !res.Has(latch.ActionPaused)
		} else {
			w.labels[api.PausedLabel] = nil
		}
	}
	if a, ok := res.Action(latch.ActionAbortInKargo); ok && !s.dryRun {
		// Kargo's own request token: Kargo aborts the verification that
		// follows kargo-latch's run, and records Failed itself. Written
		// with the record that says it was asked, so it is asked once.
		w.annotations[kargo.AbortAnnotation] = a.VerificationID
	}
	if res.Has(latch.ActionResumed) {
		// Kargo re-attempts auto-promotion at once instead of at its next
		// periodic pass, five minutes away.
		w.annotations[kargo.RefreshAnnotation] = s.now.UTC().Format(time.RFC3339Nano)
	}
	if len(w.annotations) == 0 && len(w.labels) == 0 {
		return nil
	}
	return w
}
