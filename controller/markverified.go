package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// markRetryAfter is how long a Stage waits to try marking again after the
// operator was refused the right: an administrator may install the
// mark-verified component meanwhile, and there is no event to wait for.
const markRetryAfter = time.Minute

// errMarkForbidden is returned by markVerified when the operator may not
// read or patch Freight: the install lacks the mark-verified component.
type errMarkForbidden struct{ err error }

func (e errMarkForbidden) Error() string { return e.err.Error() }

// markVerified carries out a step's ActionMarkVerified: for each Freight it
// writes status.verifiedIn.<stage>.verifiedAt, as Kargo does when one of its
// passes sees the Stage Healthy, so that downstream Stages receive it. It
// runs before the record that says so is stored, and is safe to repeat:
//
//   - the Freight is read live (there is no Freight cache); one already
//     verified in the Stage, by Kargo or by an earlier try of ours, is left
//     as it is: no write, no Event;
//   - the FreightVerified Event has a name derived from the Stage, the cycle
//     and the Freight, and is created before the patch, so that a crash
//     between the two leaves exactly one Event once the retry has patched;
//   - the patch carries the resourceVersion it was read at and adds only
//     the one key, so it can never change an entry someone else wrote.
func (c *Controller) markVerified(ctx context.Context, stage *kargo.Stage, rec latch.Record, a latch.Action) error {
	freights := c.cfg.Dynamic.Resource(kargo.FreightsResource).Namespace(stage.Namespace)
	logger := klog.FromContext(ctx)
	for _, name := range a.Freight {
		f, err := freights.Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			logger.Info("Freight to mark verified is gone; skipping it", "freight", name)
			continue
		case apierrors.IsForbidden(err):
			return errMarkForbidden{err}
		case err != nil:
			return fmt.Errorf("reading Freight %s to mark it verified: %w", name, err)
		}
		if _, done, _ := unstructured.NestedMap(f.Object, "status", "verifiedIn", stage.Name); done {
			logger.V(2).Info("Freight is already verified in the Stage", "freight", name)
			continue
		}
		// No time in the message: a retry after a crash between the Event
		// and the patch may latch, and so mark, a moment later.
		msg := fmt.Sprintf("Marked Freight %s verified in Stage %s: %s", name, stage.Name, a.Message)
		if err := c.eventOnce(ctx, stage, "verified", rec.Cycle()+"\x00"+name, corev1.EventTypeNormal, ReasonFreightVerified, msg); err != nil {
			return err
		}
		patch, _ := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": f.GetResourceVersion()},
			"status": map[string]any{"verifiedIn": map[string]any{
				stage.Name: map[string]any{"verifiedAt": a.VerifiedAt.UTC().Format(time.RFC3339)},
			}},
		})
		_, err = freights.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager}, "status")
		switch {
		case apierrors.IsForbidden(err):
			return errMarkForbidden{err}
		case err != nil:
			return fmt.Errorf("marking Freight %s verified: %w", name, err)
		}
		logger.Info("Marked Freight verified in the Stage", "freight", name, "verifiedAt", a.VerifiedAt)
		c.cfg.Metrics.FreightVerified.WithLabelValues(stage.Namespace, stage.Name).Inc()
	}
	return nil
}

// markForbidden reports a refused mark once per cycle, counts every refused
// try, and holds further tries of this cycle back for markRetryAfter.
func (c *Controller) markForbidden(stage *kargo.Stage, m *memo, rec latch.Record, err error, now time.Time) {
	c.cfg.Metrics.MarkVerifiedErrors.WithLabelValues(stage.Namespace, stage.Name).Inc()
	m.markRetryAt = now.Add(markRetryAfter)
	m.markHeldCycle = rec.Cycle()
	if warnOnce(&m.markForbiddenCycle, rec.Cycle()) {
		c.warn(stage, ReasonMarkVerifiedForbidden,
			"mark-verified is on, but kargo-latch may not mark Freight verified (%v); install the mark-verified component (manifests/components/mark-verified) or turn %s off. The latch and pauses are not affected; kargo-latch tries again every %s",
			err, MarkVerifiedAnnotation, markRetryAfter)
	}
}

// reportDryRunMark says what a dry run would have marked.
func (c *Controller) reportDryRunMark(ctx context.Context, stage *kargo.Stage, a latch.Action) {
	klog.FromContext(ctx).Info("Dry run: would mark Freight verified in the Stage", "freight", a.Freight, "verifiedAt", a.VerifiedAt)
	c.event(stage, corev1.EventTypeNormal, ReasonFreightVerified,
		fmt.Sprintf("Dry run: would mark Freight %s verified in Stage %s: %s", strings.Join(a.Freight, ", "), stage.Name, a.Message))
}

// markHeld names the cycle whose marking waits for a retry after a
// refusal, if any: a new cycle is tried at once.
func (m *memo) markHeld(now time.Time) string {
	if now.Before(m.markRetryAt) {
		return m.markHeldCycle
	}
	return ""
}
