package controller

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kargo-latch/kargo-latch/controller/markverified"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// markPass marks the Freight of a stored latch verified. It judges on a view
// read from the API server, never on the cache: the Stage as the record was
// just stored (stored), or read now, and the StagePauses listed now. A mark
// is never taken back, so a pause made, a promotion started or a health
// turned a moment ago must stop it. The marked Freight are then stored in
// the record. A mark that fails holds back marking of this cycle for a
// while; it never holds back the rest of the latch, which is stored already.
// A mark that conflicts is retried at once, as every write conflict.
func (c *Controller) markPass(ctx context.Context, s *snapshot, stored *kargo.Stage, reads *markverified.Reads) error {
	m := s.memo
	stage := stored
	if stage == nil {
		var err error
		if stage, err = c.liveStage(ctx, s.key); stage == nil || err != nil {
			return err
		}
	}
	pauses, err := reads.Pauses()
	if err != nil {
		return err
	}
	value, err := stage.State.Read()
	if err != nil {
		return err
	}
	v := c.snapshotOf(s.key, stage, value, m, pauses, nil, &s.settings)
	if v.leftAlone {
		return nil
	}
	v.now, v.obs.MayMark = s.now, true
	res := latch.Step(v.settings, v.prior, v.obs, v.now)
	a, ok := res.Action(latch.ActionMarkVerified)
	if !ok {
		// The view moved on since the cache showed it; the next sync, on
		// its watch event, judges again.
		return nil
	}
	if v.dryRun {
		c.marker.ReportDryRun(ctx, stage, a, reads)
	} else if err := c.marker.Mark(ctx, stage, res.Record, a, reads); err != nil {
		if apierrors.IsConflict(err) {
			// The Freight changed since it was read (Kargo marking it
			// itself, say): a retry from fresh reads, as every conflict
			// (syncFailed), not an error.
			return err
		}
		c.marker.Failed(ctx, stage, &m.mark, res.Record, err, v.now)
		return nil
	}
	m.mark.Marked()
	if err := c.storeStep(ctx, v, res); err != nil {
		return err
	}
	m.mark.Stored(res.Record.Cycle())
	c.afterStore(stage, pauses, res, false)
	return nil
}
