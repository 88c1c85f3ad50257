package controller

import (
	"context"
	"time"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/controller/pausing"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// announceWithin bounds how long after a Stage became paused a replica that
// does not remember announcing it makes sure its StagePaused Event exists. The API server keeps Events for an hour by default (--event-ttl),
// counted from when the Event was made, which is never long before the
// record's PausedBy.At: past this age a missing Event may have expired, and
// making it again would announce an old pause as new.
const announceWithin = 45 * time.Minute

// announcement is the StagePaused Event a sync owes. It is made beside the
// store of the record rather than before it, so that a pause costs one round
// trip to the API server on its way to the Stage's label, not two.
//
// The record's PausedBy is what makes that safe across a crash: when the
// record is stored and the Event is not (a crash, a refused create), the
// next sync, in this replica or after a restart, finds a PausedBy it does not
// remember announcing, and makes the Event under its deterministic name
// (finding it there if it was made: a create that conflicts, not a read, so
// the operator needs no right to read Events), even if the pause is gone.
type announcement struct {
	mark  latch.PauseMark
	pause *v1alpha1.StagePause // nil once deleted
}

// owedAnnouncement says which StagePaused Event, if any, the sync must make
// along with the record it is about to store.
func owedAnnouncement(s *snapshot, res latch.Result) *announcement {
	if s.dryRun {
		return nil
	}
	m := s.memo
	mark := res.Record.PausedBy
	if mark == nil && res.Has(latch.ActionResumed) {
		// The pause that paused the Stage may be owed its Event still.
		mark = s.prior.PausedBy
	}
	if mark == nil && m.owed != nil {
		// Refused before, and the record that named it is gone since (the
		// Stage was resumed meanwhile): this replica still owes it.
		return m.owed
	}
	if mark == nil || m.announced == mark.Name+"\x00"+mark.UID {
		return nil
	}
	var p *v1alpha1.StagePause
	if q := pausing.PauseNamed(s.pauses, mark.Name); q != nil && string(q.UID) == mark.UID {
		p = q
	}
	if !res.Has(latch.ActionPaused) && s.now.Sub(mark.At) > announceWithin {
		return nil
	}
	return &announcement{mark: *mark, pause: p}
}

// announce makes the Event of a, concurrently with the caller's store; the
// returned function waits for it, and remembers it once made.
func (c *Controller) announce(ctx context.Context, stage *kargo.Stage, m *memo, a *announcement) (wait func() error) {
	if a == nil {
		return func() error { return nil }
	}
	done := make(chan error, 1)
	go func() { done <- c.failures.Announce(ctx, stage, a.mark, a.pause) }()
	return func() error {
		if err := <-done; err != nil {
			m.owed = a
			return err
		}
		m.announced, m.owed = a.mark.Name+"\x00"+a.mark.UID, nil
		return nil
	}
}
