package controller

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
)

// --dry-run says what it would do, in Events (and logs), and writes nothing:
// the pause a failure would create, the queued auto-promotions a pause would
// abort.
func TestDryRunReportsPausesAndDrains(t *testing.T) {
	stage := failedStage()
	annotations := stage.GetAnnotations()
	annotations[api.DrainOnPauseAnnotation] = "true"
	stage.SetAnnotations(annotations)
	queued := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kargo.akuity.io/v1alpha1", "kind": "Promotion",
		"metadata": map[string]any{"name": "prod.queued", "namespace": "shop", "labels": map[string]any{"kargo.akuity.io/stage": "prod"}},
		"spec":     map[string]any{"stage": "prod", "freight": "f2"},
		"status":   map[string]any{"phase": "Pending"},
	}}
	hold := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "StagePause",
		"metadata": map[string]any{"name": "hold", "namespace": "shop", "uid": "hold-uid"},
		"spec":     map[string]any{"stage": "prod", "reason": "Manual"},
	}}
	f := newFixture(t, true, stage, queued, hold)
	if msg := f.waitEvent("Warning StagePaused"); !strings.Contains(msg, "Dry run: would create StagePause prod-promotionfailed-") {
		t.Errorf("dry-run pause report: %s", msg)
	}
	if msg := f.waitEvent("Normal PromotionDrained"); !strings.Contains(msg, "Dry run: would abort 1 queued auto-promotion(s) as StagePause hold takes effect: prod.queued") {
		t.Errorf("dry-run drain report: %s", msg)
	}
	f.idle()
	for _, a := range f.client.Actions() {
		if v := a.GetVerb(); v != "get" && v != "list" && v != "watch" {
			t.Errorf("dry run wrote: %s %s", v, a.GetResource().Resource)
		}
	}
	// The paused label it would have written is not there: a later sync
	// must not take that for a label someone removed.
	synced := f.syncs()
	f.touchProd()
	waitUntil(t, func() bool { return f.syncs() > synced })
	f.idle()
	if n := f.countEvents("Warning PauseLabelRestored", ""); n != 0 {
		t.Errorf("dry run reported %d restored labels it never wrote, want none", n)
	}
}
