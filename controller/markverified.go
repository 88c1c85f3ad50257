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

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/controller/report"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// markRetryAfter is how long a Stage waits to try marking again after the
// operator was refused the right: an administrator may install the
// mark-verified component meanwhile, and there is no event to wait for.
// Other errors (an outage) are retried sooner, with backoff up to it; a
// conflict with Kargo writing the Freight is retried at once (markPass).
const (
	markRetryAfter      = time.Minute
	markErrorRetryFirst = 2 * time.Second
)

// markPass marks the Freight of a stored latch verified. It judges on a view
// read from the API server, never on the cache: the Stage as the record was
// just stored (stored), or read now, and the StagePauses listed now. A mark
// is never taken back, so a pause made, a promotion started or a health
// turned a moment ago must stop it. The marked Freight are then stored in
// the record. A mark that fails holds back marking of this cycle for a
// while; it never holds back the rest of the latch, which is stored already.
// A mark that conflicts is retried at once, as every write conflict.
func (c *Controller) markPass(ctx context.Context, s *snapshot, stored *kargo.Stage, reads *markReads) error {
	m := s.memo
	stage := stored
	if stage == nil {
		var err error
		if stage, err = c.liveStage(ctx, s.key); stage == nil || err != nil {
			return err
		}
	}
	<-reads.done
	if reads.pausesErr != nil {
		return reads.pausesErr
	}
	value, err := stage.State.Read()
	if err != nil {
		return err
	}
	v := c.snapshotOf(s.key, stage, value, m, reads.pauses, nil)
	if v.leftAlone {
		return nil
	}
	v.now, v.obs.MayMark = s.now, true
	res := latch.Step(v.settings, v.prior, v.obs, v.now)
	a, ok := actionOf(res, latch.ActionMarkVerified)
	if !ok {
		// The view moved on since the cache showed it; the next sync, on
		// its watch event, judges again.
		return nil
	}
	if v.dryRun {
		c.reportDryRunMark(ctx, stage, a, reads)
	} else if err := c.markVerified(ctx, stage, res.Record, a, reads); err != nil {
		if apierrors.IsConflict(err) {
			// The Freight changed since it was read (Kargo marking it
			// itself, say): a retry from fresh reads, as every conflict
			// (syncFailed), not an error.
			return err
		}
		c.markFailed(ctx, stage, m, res.Record, err, v.now)
		return nil
	}
	m.markErrors = 0
	if v.dryRun {
		m.dryRunRecord = &res.Record
	} else if w := stageWriteFor(v, res); w != nil {
		if _, err := c.store(ctx, v, w); err != nil {
			return err
		}
	}
	m.markedCycle = res.Record.Cycle()
	c.afterStore(stage, reads.pauses, res, false)
	return nil
}

// markVerified carries out a step's ActionMarkVerified: for each Freight it
// writes status.verifiedIn.<stage>.verifiedAt = the stored latchedAt, as
// Kargo does when one of its passes sees the Stage Healthy, so that
// downstream Stages receive it. It runs before the record that says so is
// stored, and is safe to repeat after a crash at any point:
//
//   - the Freight is read live (there is no Freight cache);
//   - a Freight not yet verified in the Stage gets a merge patch that adds
//     only that key, conditional on the resourceVersion it was read at, so
//     it can never change an entry someone else wrote;
//   - then the FreightVerified Event is created under a name derived from
//     the Stage, the cycle and the Freight;
//   - a Freight already verified in the Stage by kargo-latch itself, at
//     the stored latchedAt, was marked by an earlier try cut short: it
//     gets its Event if the crash came before it (a second create finds
//     the first). One verified by anyone else was verified by Kargo (even
//     in the very second the cycle latched, with the same verifiedAt): no
//     write, no Event.
func (c *Controller) markVerified(ctx context.Context, stage *kargo.Stage, rec latch.Record, a latch.Action, reads *markReads) error {
	freights := c.cfg.Dynamic.Resource(kargo.FreightsResource).Namespace(stage.Namespace)
	logger := klog.FromContext(ctx)
	verifiedAt := a.VerifiedAt.UTC().Format(time.RFC3339)
	for _, name := range a.Freight {
		f, err := c.freight(ctx, reads, stage.Namespace, name)
		switch {
		case apierrors.IsNotFound(err):
			logger.Info("Freight to mark verified is gone; skipping it", "freight", name)
			continue
		case err != nil:
			return fmt.Errorf("reading Freight %s to mark it verified: %w", name, err)
		}
		if at, verified := verifiedInAt(f, stage.Name); verified {
			if at != verifiedAt || !markedByUs(f, stage.Name) {
				logger.V(2).Info("Freight is already verified in the Stage", "freight", name, "verifiedAt", at)
				continue
			}
		} else {
			patch, _ := json.Marshal(map[string]any{
				"metadata": map[string]any{"resourceVersion": f.GetResourceVersion()},
				"status":   map[string]any{"verifiedIn": map[string]any{stage.Name: map[string]any{"verifiedAt": verifiedAt}}},
			})
			_, err = freights.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: api.FieldManager}, "status")
			if err != nil {
				return fmt.Errorf("marking Freight %s verified: %w", name, err)
			}
			logger.Info("Marked Freight verified in the Stage", "freight", name, "verifiedAt", verifiedAt)
			c.cfg.Metrics.FreightVerified.WithLabelValues(stage.Namespace, stage.Name).Inc()
		}
		msg := fmt.Sprintf("Marked Freight %s verified in Stage %s at %s: %s", name, stage.Name, verifiedAt, a.Message)
		if err := c.report.Once(ctx, stage, report.OnceName(stage, "verified", rec.Cycle()+"\x00"+name), corev1.EventTypeNormal, api.ReasonFreightVerified, msg); err != nil {
			return err
		}
	}
	return nil
}

// verifiedInAt reads a Freight's verifiedIn entry for the Stage: whether
// there is one, whatever its shape, and its verifiedAt.
func verifiedInAt(f *unstructured.Unstructured, stage string) (at string, verified bool) {
	entry, verified, _ := unstructured.NestedFieldNoCopy(f.Object, "status", "verifiedIn", stage)
	if m, ok := entry.(map[string]any); ok {
		at, _ = m["verifiedAt"].(string)
	}
	return at, verified
}

// markedByUs reports whether kargo-latch wrote the Freight's verifiedAt for
// the Stage. The API server records in managedFields which field manager
// set each field, and only kargo-latch writes with FieldManager: that tells
// its own mark, found by a try after a crash, from Kargo's, which may carry
// the very same time.
func markedByUs(f *unstructured.Unstructured, stage string) bool {
	for _, mf := range f.GetManagedFields() {
		if mf.Manager != api.FieldManager || mf.Subresource != "status" || mf.FieldsV1 == nil {
			continue
		}
		var fields map[string]any
		if json.Unmarshal(mf.FieldsV1.GetRawBytes(), &fields) != nil {
			continue
		}
		if _, ok, _ := unstructured.NestedFieldNoCopy(fields, "f:status", "f:verifiedIn", "f:"+stage, "f:verifiedAt"); ok {
			return true
		}
	}
	return false
}

// markFailed holds further tries of this cycle back: a refused right (the
// install lacks the mark-verified component) for markRetryAfter, counted
// every time and reported once per cycle; any other error for a backoff
// that starts at markErrorRetryFirst.
func (c *Controller) markFailed(ctx context.Context, stage *kargo.Stage, m *memo, rec latch.Record, err error, now time.Time) {
	m.markHeldCycle = rec.Cycle()
	if !apierrors.IsForbidden(err) {
		wait := min(markRetryAfter, markErrorRetryFirst<<min(m.markErrors, 5))
		m.markErrors++
		m.markRetryAt = now.Add(wait)
		klog.FromContext(ctx).Error(err, "Marking Freight verified failed; trying again", "after", wait)
		return
	}
	// The install lacks the mark-verified component.
	c.cfg.Metrics.MarkVerifiedErrors.WithLabelValues(stage.Namespace, stage.Name).Inc()
	m.markRetryAt = now.Add(markRetryAfter)
	if warnOnce(&m.markForbiddenCycle, rec.Cycle()) {
		c.report.Warn(stage, api.ReasonMarkVerifiedForbidden,
			"mark-verified is on, but kargo-latch may not mark Freight verified (%v); install the mark-verified component (manifests/components/mark-verified) or turn %s off. The latch and pauses are not affected; kargo-latch tries again every %s",
			err, api.MarkVerifiedAnnotation, markRetryAfter)
	}
}

// reportDryRunMark says what a dry run would have marked: the Freight not
// yet verified in the Stage, as read now (read errors count as "would
// mark": a dry run writes nothing either way).
func (c *Controller) reportDryRunMark(ctx context.Context, stage *kargo.Stage, a latch.Action, reads *markReads) {
	var would []string
	for _, name := range a.Freight {
		f, err := c.freight(ctx, reads, stage.Namespace, name)
		if err == nil {
			if _, verified := verifiedInAt(f, stage.Name); verified {
				continue
			}
		}
		would = append(would, name)
	}
	if len(would) == 0 {
		return
	}
	klog.FromContext(ctx).Info("Dry run: would mark Freight verified in the Stage", "freight", would, "verifiedAt", a.VerifiedAt)
	c.report.Event(stage, corev1.EventTypeNormal, api.ReasonFreightVerified,
		fmt.Sprintf("Dry run: would mark Freight %s verified in Stage %s: %s", strings.Join(would, ", "), stage.Name, a.Message))
}

// mayTryMark reports whether this replica should try to mark the Freight
// of cycle now: not when it stored the marks of that cycle itself (its
// cache may not show them yet, and reading to find out costs three
// requests), nor while a failed try holds the cycle back. A new cycle is
// tried at once.
func (m *memo) mayTryMark(cycle string, now time.Time) bool {
	held := m.markHeldCycle == cycle && now.Before(m.markRetryAt)
	return cycle != m.markedCycle && !held
}

// markRetry says when a Stage whose marking was refused should try again.
func (c *Controller) markRetry(m *memo, now time.Time) time.Duration {
	if now.Before(m.markRetryAt) {
		return m.markRetryAt.Sub(now)
	}
	return 0
}
