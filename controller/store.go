package controller

import (
	"context"
	"encoding/json"
	"fmt"

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
// stored.
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
