package controller

import (
	"context"
	"slices"
	"time"

	"k8s.io/client-go/tools/cache"

	"github.com/kargo-latch/kargo-latch/controller/verification"
	"github.com/kargo-latch/kargo-latch/latch"
)

// Verify-on-latch's steps of a Stage's sync, the glue between the snapshot,
// the judgement and controller/verification (c.verifier), which does the
// work and the reports: observing the runs (read), making the cycle's run
// (act, 1b) and ending the runs no cycle needs (act, 4b). A start or an end
// cannot be taken back, so each is made from a judgement of the Stage as
// the API server has it (refresh), as a failure's pause is.

// observeRuns puts the Stage's runs into a snapshot, and whether a refused
// start still waits. Only a project whose runs the operator caches has
// them all: elsewhere verify-on-latch is off (verifyavailability.go), and
// only the run the record follows is read.
func (c *Controller) observeRuns(ctx context.Context, s *snapshot) error {
	if s.leftAlone {
		return nil
	}
	m := &s.memo.verification
	if !c.watchesRunsIn(s.key.Namespace) {
		// Verify-on-latch is off here for now (no cache of runs, or not
		// yet synced), but the run of kargo-latch's that the record of a
		// failed cycle follows is still read live, best effort, so that
		// it leaves Kargo's lookup.
		if s.prior.Phase == latch.PhaseFailed {
			s.obs.Runs = c.verifier.ObserveWhileOff(ctx, s.stage, m, s.prior.Analysis)
		}
		return nil
	}
	s.obs.StartRefused = m.RetryIn(s.prior.Cycle(), s.now) > 0
	runs, gone, err := c.verifier.Observe(ctx, s.stage, m, s.prior.Analysis, c.cachedRuns(s.key.Namespace, s.key.Name))
	if err != nil {
		return err
	}
	s.obs.Runs, s.obs.RunGone = runs, gone
	return nil
}

// startVerification makes the run a plan asks for. It judges again only
// when the live Stage differs from the cached one, or the start found other
// runs or was refused: a run made leaves the plan, whose record already
// names it, as it is. Kargo's own lookup is played with the live reads, so
// that a run Kargo (or this operator, before a crash) made for the Freight
// collection is followed, never doubled.
func (c *Controller) startVerification(ctx context.Context, s *snapshot, p plan) (*snapshot, plan, error) {
	fresh, err := c.refresh(ctx, s)
	if fresh == nil || err != nil || fresh.leftAlone {
		return nil, p, err
	}
	if fresh != s {
		if s, p = fresh, judge(fresh); p.startRun == nil {
			return s, p, nil
		}
	}
	outcome, found, err := c.verifier.Start(ctx, s.stage, &s.memo.verification, verification.RunStart{
		Cycle: s.prior.Cycle(), Collection: p.result.Record.FreightID, Run: p.startRun.Run, Now: s.now,
	})
	switch {
	case err != nil:
		return nil, p, err
	case outcome == verification.Created:
		return s, p, nil
	case outcome == verification.Refused:
		s.obs.StartRefused = true
		return s, judge(s), nil
	}
	out := *s
	out.obs.Runs = append(slices.Clone(s.obs.Runs), found...)
	return &out, judge(&out), nil
}

// endRuns ends the runs no live cycle needs, judged again on the Stage as
// the API server has it: the cache of runs may show a run this replica
// just made while the cached Stage is still behind the record that names
// it.
func (c *Controller) endRuns(ctx context.Context, s *snapshot, runs []latch.Action) error {
	if len(runs) == 0 {
		return nil
	}
	fresh, err := c.refresh(ctx, s)
	if fresh == nil || err != nil || fresh.leftAlone {
		return err
	}
	if fresh != s {
		runs = judge(fresh).endRuns
	}
	return c.verifier.End(ctx, s.stage, &s.memo.verification, runs)
}

// requeueRetry syncs the Stage again after d, in the plain lane: a retry
// of a refused start owes no pause, and must not go before Stages that do
// (a due time-based transition of the latch goes in the urgent lane).
func (c *Controller) requeueRetry(key cache.ObjectName, d time.Duration) {
	if w := c.work.Load(); w != nil && d > 0 {
		w.stages.AddAfter(key, d)
	}
}
