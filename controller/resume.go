package controller

import (
	"context"
	"fmt"
	"strings"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/controller/pausing"
	"github.com/kargo-latch/kargo-latch/kargo"
)

// A failure's StagePause is made before the record that names it is stored,
// so that the gate does not wait on the Stage's store (which Kargo's webhook,
// a conflict storm or an outage can hold up). Its finalizer is what keeps a
// resume from being undone meanwhile: deleting the pause resumes at once,
// but the object stays, held for resume, until the Stage's record is
// durable; a failure judged again finds it there and does not make it anew.

// heldPauses returns the cached pauses this operator made for the Stage's
// failures that someone deleted and that it still holds.
func (c *Controller) heldPauses(stage *kargo.Stage) []*v1alpha1.StagePause {
	var out []*v1alpha1.StagePause
	for _, p := range c.pausesIn(stage.Namespace) {
		if p.HeldForResume() && p.Covers(stage.Name) && pausing.OwnedBy(p, stage) {
			out = append(out, p)
		}
	}
	pausing.SortPauses(out)
	return out
}

// releasePauses lets go of held pauses once the record that shows their
// resume is stored: they are deleted for good.
func (c *Controller) releasePauses(ctx context.Context, held []*v1alpha1.StagePause) error {
	for _, p := range held {
		if err := c.releaser.Release(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// resumedMessage is the message of the StageResumed Event. A person who
// rolled back while the Stage was paused made Kargo (v1.11.1+) hold
// auto-promotion from that origin, and that hold outlives the StagePause:
// the Event then says so, and how to release it, so that nobody wonders why
// nothing flows after the resume. kargo-latch never releases it itself.
// How to release comes before the holds, and the list stops after a few:
// an Event's message is cut at a kilobyte, and a Stage name alone may take
// a quarter of it.
func resumedMessage(stage *kargo.Stage) string {
	const resumed = "The last StagePause covering the Stage was deleted; Kargo was asked to refresh it and may auto-promote again"
	if stage.Status == nil || len(stage.Status.Holds) == 0 {
		return resumed
	}
	holds := stage.Status.Holds
	held := make([]string, 0, min(len(holds), maxHoldsNamed))
	for _, h := range holds[:min(len(holds), maxHoldsNamed)] {
		held = append(held, h.Describe())
	}
	list := strings.Join(held, "; ")
	if more := len(holds) - len(held); more > 0 {
		list += fmt.Sprintf("; and %d more", more)
	}
	return fmt.Sprintf("%s. But Kargo itself still holds auto-promotion: to release it, %s. Kargo's holds: %s",
		resumed, kargo.HoldRelease(stage.Namespace, stage.Name), list)
}

// maxHoldsNamed is how many holds the StageResumed Event names; kargo-latch
// status shows them all.
const maxHoldsNamed = 3
