// Package markverified marks a Stage's Freight verified once its health
// latched, as Kargo itself does when one of its passes sees the Stage
// Healthy: status.verifiedIn.<stage>.verifiedAt on each Freight, so that
// downstream Stages receive it. It is opt-in (the mark-verified setting and
// the mark-verified component's rights). The sync decides when a mark is
// due and judges it again on the stored latch (controller/markpass.go); this
// package reads what the mark rests on, writes the marks and their
// FreightVerified Events, and holds tries back after a refusal.
package markverified

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
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/controller/report"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/metrics"
)

// Marker writes marks.
type Marker struct {
	dynamic    dynamic.Interface
	report     *report.Reporter
	metrics    *metrics.Recorder
	livePauses LivePauses
}

// LivePauses lists the StagePauses covering a Stage, read from the API
// server: a mark is never taken back, so it rests on no cache.
type LivePauses func(ctx context.Context, namespace, stage string) ([]*v1alpha1.StagePause, error)

// New returns a Marker that reads and writes Freight with dynamic.
func New(dynamic dynamic.Interface, report *report.Reporter, metrics *metrics.Recorder, livePauses LivePauses) *Marker {
	return &Marker{dynamic: dynamic, report: report, metrics: metrics, livePauses: livePauses}
}

// Mark carries out a step's ActionMarkVerified: for each Freight it
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
func (mk *Marker) Mark(ctx context.Context, stage *kargo.Stage, rec latch.Record, a latch.Action, reads *Reads) error {
	freights := mk.dynamic.Resource(kargo.FreightsResource).Namespace(stage.Namespace)
	logger := klog.FromContext(ctx)
	verifiedAt := a.VerifiedAt.UTC().Format(time.RFC3339)
	for _, name := range a.Freight {
		f, err := reads.freight(ctx, stage.Namespace, name)
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
			mk.metrics.FreightVerified.WithLabelValues(stage.Namespace, stage.Name).Inc()
		}
		msg := fmt.Sprintf("Marked Freight %s verified in Stage %s at %s: %s", name, stage.Name, verifiedAt, a.Message)
		if err := mk.report.Once(ctx, stage, report.OnceName(stage, "verified", rec.Cycle()+"\x00"+name), corev1.EventTypeNormal, api.ReasonFreightVerified, msg); err != nil {
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

// ReportDryRun says what a dry run would have marked: the Freight not
// yet verified in the Stage, as read now (read errors count as "would
// mark": a dry run writes nothing either way).
func (mk *Marker) ReportDryRun(ctx context.Context, stage *kargo.Stage, a latch.Action, reads *Reads) {
	var would []string
	for _, name := range a.Freight {
		f, err := reads.freight(ctx, stage.Namespace, name)
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
	mk.report.Event(stage, corev1.EventTypeNormal, api.ReasonFreightVerified,
		fmt.Sprintf("Dry run: would mark Freight %s verified in Stage %s: %s", strings.Join(would, ", "), stage.Name, a.Message))
}
