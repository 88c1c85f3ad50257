package controller

import (
	"context"
	"errors"
	"time"

	"k8s.io/klog/v2"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/controller/markverified"
	"github.com/kargo-latch/kargo-latch/controller/pausing"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// execute carries out a plan, in its order, and says when to sync again.
// It owns the sync's concurrency: the StagePaused Event, the drain and the
// reads a mark rests on run beside the store, and are waited for here.
func (c *Controller) execute(ctx context.Context, s *snapshot, p plan) (time.Duration, error) {
	// 1. The failure's pause, made first.
	if len(p.createPauses) > 0 {
		var err error
		if s, p, err = c.makeFailurePauses(ctx, s, p); s == nil || err != nil {
			return 0, err
		}
	}
	// 1b. The cycle's AnalysisRun, made before the record names it.
	if p.startRun != nil {
		var err error
		if s, p, err = c.startVerification(ctx, s, p); s == nil || err != nil {
			return 0, err
		}
	}
	m := s.memo
	c.failures.ReportDryRun(ctx, s.stage, p.dryRunPauses)
	if s.dryRun && !s.leftAlone {
		m.dryRunRecord = &p.result.Record
	}

	// 2. The store, and beside it the StagePaused Event, the drain and the
	// mark's reads.
	var reads *markverified.Reads
	if len(p.mark) > 0 {
		reads = c.marker.StartReads(ctx, s.key.Namespace, s.key.Name, p.mark)
		defer reads.Wait()
	}
	if p.drainOwedGone {
		m.liveDrainOwed = "" // that pause is gone: nothing is owed to it
	}
	drained := c.drainBeside(ctx, s, p.drain)
	announced := c.announce(ctx, s.stage, m, p.announce)
	var stored *kargo.Stage
	var err error
	if p.write != nil && !s.dryRun {
		stored, err = c.store(ctx, s, p.write)
	}
	drainErr := drained()
	if err != nil {
		_ = announced()
		if drainErr != nil {
			klog.FromContext(ctx).Error(drainErr, "Draining the Stage's queued auto-promotions failed too; retrying with the store")
		}
		return 0, err
	}

	if p.result.Has(latch.ActionVerificationNotPickedUp) && !s.leftAlone {
		c.verifier.ExplainPickup(ctx, s.key.Namespace, &p.result)
	}
	// 3. Events and metrics, once the record that they report is stored. An
	// Event the API refused holds back neither the release nor the mark:
	// the announcement is retried on its own (see announce).
	c.afterStore(s.stage, s.pauses, p.result, stored != nil && p.write.restoresLabel)
	if !s.leftAlone {
		m.health = s.obs.Health
	}
	announceErr := announced()

	// 4. Held pauses let go: the record that shows their resume is stored.
	if err := c.releasePauses(ctx, p.release); err != nil {
		return 0, err
	}
	// 4b. Runs no cycle needs any more ended, the record saying why. A
	// leftover run that cannot be ended now holds back neither the mark
	// nor the rest: its error is returned last, and the sync retried.
	endErr := c.endRuns(ctx, s, p.endRuns)
	// 5. The mark, judged again on the stored view.
	if reads != nil {
		if err := c.markPass(ctx, s, stored, reads); err != nil {
			return 0, errors.Join(err, endErr)
		}
	}
	if endErr != nil {
		return 0, endErr
	}
	if announceErr != nil {
		return 0, announceErr
	}
	if drainErr != nil {
		return 0, drainErr
	}
	if s.leftAlone {
		return 0, nil
	}
	statusCheck := c.checkStatus(s.stage, m, s.now)
	if after := p.result.RequeueAfter; after > 0 {
		klog.FromContext(ctx).V(4).Info("Time-based transition pending", "phase", p.result.Record.Phase, "after", after)
	}
	c.requeueRetry(s.key, m.verification.RetryIn(s.prior.Cycle(), s.now))
	return latch.Earliest(p.result.RequeueAfter, statusCheck, m.mark.RetryIn(s.now)), nil
}

// drainBeside drains a Stage as planned, concurrently with the caller's
// store of the record that says it is paused; the returned function waits
// for it. The drain's live read and its aborts would otherwise stand
// between a failure and the Stage's label: a pause would cost three round
// trips to the API server instead of two (the StagePause, then the label).
// Either order survives a crash or a refused write: the drain is
// idempotent, so a sync whose store failed repeats it; a record stored
// without its drain is a paused Stage, whose syncs read live again until a
// live drain succeeds (a refused read or abort), or, after a restart, drain
// every queued auto-promotion the cache shows, which is all of them once
// its list is read.
func (c *Controller) drainBeside(ctx context.Context, s *snapshot, d *pausing.DrainPlan) (wait func() error) {
	m := s.memo
	if d == nil {
		return func() error { return nil }
	}
	done := make(chan error, 1)
	go func() { done <- c.drainer.Drain(ctx, s.stage, d) }()
	return func() error {
		err := <-done
		// A live drain that failed is owed until one succeeds: the
		// retry of a paused Stage would otherwise drain from the cache
		// alone, which may not show an auto-promotion made just before
		// the pause (a stalled watch).
		switch {
		case d.Live != nil && err != nil:
			m.liveDrainOwed = d.Live.UID
		case d.Live != nil && m.liveDrainOwed == d.Live.UID:
			m.liveDrainOwed = ""
		}
		return err
	}
}

// checkStatus reports a Stage that still has no status once it is older
// than StatusMissingAfter, and otherwise says when to look again.
func (c *Controller) checkStatus(stage *kargo.Stage, m *memo, now time.Time) time.Duration {
	if stage.Status != nil {
		m.statusMissing = false
		return 0
	}
	if wait := stage.CreationTimestamp.Add(c.cfg.StatusMissingAfter).Sub(now); wait > 0 {
		return wait
	}
	if !m.statusMissing {
		m.statusMissing = true
		c.report.Warn(stage, api.ReasonStatusMissing, "Stage has no status %s after its creation: Kargo has not reconciled it; kargo-latch keeps it Idle", c.cfg.StatusMissingAfter)
		c.cfg.Metrics.InvalidInput.WithLabelValues(stage.Namespace, stage.Name, "status").Inc()
	}
	return 0
}

// makeFailurePauses makes the StagePauses a plan asks for, and judges again
// with them. They are made from the judgement of a snapshot: one taken from
// a cache that may be behind the API server is taken and judged again live
// first (nil when the cache is behind for sure, its store's event bringing
// the next sync, or the record there is a newer kargo-latch's). The same sync then sees the pauses: the Stage is labeled
// and they take effect without waiting for the informer to deliver them. A
// pause found deleted was resumed.
func (c *Controller) makeFailurePauses(ctx context.Context, s *snapshot, p plan) (*snapshot, plan, error) {
	fresh, err := c.refresh(ctx, s)
	if fresh == nil || err != nil || fresh.leftAlone {
		// Behind for sure, or a newer kargo-latch wrote the record: this
		// sync does nothing more.
		return nil, p, err
	}
	if fresh != s {
		s, p = fresh, judge(fresh)
		if len(p.createPauses) == 0 {
			return s, p, nil
		}
	}
	pauses, held, madeAs, err := c.failures.Create(ctx, s.stage, p.createPauses, s.pauses, s.held)
	if err != nil {
		return nil, p, err
	}
	s = s.withPauses(pauses, held, c.cachedPromotions)
	s.obs.PausesMadeAs = madeAs
	return s, judge(s), nil
}
