package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// store writes a plan's stageWrite in one merge patch of the Stage's
// metadata. The patch carries the resourceVersion the record was computed
// from: if the Stage changed meanwhile, or the cache was stale, it
// conflicts and the sync is retried from fresh data. It returns the Stage as
// stored (nil when nothing was written).
func (c *Controller) store(ctx context.Context, s *snapshot, w *stageWrite) (*kargo.Stage, error) {
	m := s.memo
	// Until the cache shows this record, or whatever a failed write left,
	// it may be behind the server.
	m.writtenState, m.replacedVersion = digestOf(w.encoded), ""
	stored, err := c.patchMetadata(ctx, s.stage, w.annotations, w.labels)
	if err != nil && w.keepsGarbage && annotationsTooLong(err) {
		stored, err = c.storeWithoutGarbage(ctx, s.stage, s.value, w.annotations, w.labels, err)
	}
	if err != nil {
		return nil, fmt.Errorf("writing the Stage's latch record: %w", err)
	}
	if stored.ResourceVersion != s.stage.ResourceVersion {
		// Only a write that moved the Stage on leaves its old version
		// behind in the cache; a no-op one would name the current version.
		m.replacedVersion = s.stage.ResourceVersion
	}
	klog.FromContext(ctx).V(2).Info("Stored latch record", "phase", w.record.Phase, "pauses", w.record.Pauses)
	return stored, nil
}

// patchMetadata writes annotations and labels (nil values remove keys) in
// one merge patch of the Stage's metadata, conditional on the Stage's
// resourceVersion.
func (c *Controller) patchMetadata(ctx context.Context, stage *kargo.Stage, annotations, labels map[string]any) (*kargo.Stage, error) {
	md := map[string]any{"resourceVersion": stage.ResourceVersion}
	if len(annotations) > 0 {
		md["annotations"] = annotations
	}
	if len(labels) > 0 {
		md["labels"] = labels
	}
	patch, err := json.Marshal(map[string]any{"metadata": md})
	if err != nil {
		return nil, err
	}
	u, err := c.cfg.Dynamic.Resource(kargo.StagesResource).Namespace(stage.Namespace).
		Patch(ctx, stage.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: api.FieldManager})
	if err != nil {
		return nil, err
	}
	return kargo.StageFromUnstructured(u), nil
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
			w.restoresLabel = !hasAction(res, latch.ActionPaused)
		} else {
			w.labels[api.PausedLabel] = nil
		}
	}
	if hasAction(res, latch.ActionResumed) {
		// Kargo re-attempts auto-promotion at once instead of at its next
		// periodic pass, five minutes away.
		w.annotations[kargo.RefreshAnnotation] = s.now.UTC().Format(time.RFC3339Nano)
	}
	if len(w.annotations) == 0 && len(w.labels) == 0 {
		return nil
	}
	return w
}

// storeStep stores what a step changes of the Stage: the mark's own store,
// after the plan's.
func (c *Controller) storeStep(ctx context.Context, s *snapshot, res latch.Result) error {
	if s.dryRun {
		s.memo.dryRunRecord = &res.Record
		return nil
	}
	if w := stageWriteFor(s, res); w != nil {
		if _, err := c.store(ctx, s, w); err != nil {
			return err
		}
	}
	return nil
}
