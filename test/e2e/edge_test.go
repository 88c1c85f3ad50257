package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// A pause created and deleted at once leaves the Stage unpaused, whatever
// the operator saw of it.
func TestPauseCreatedAndDeletedAtOnce(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	op := startOperator(t, ns, fastSettings())
	s := env.createStage(t, ns, "prod", nil)
	promoteAndLatch(t, s)
	for range 5 {
		must(t, createPause(env.dev, pause(ns, "blink", "prod", "Manual")))
		must(t, deletePause(env.lead, ns, "blink"))
	}
	other := env.createStage(t, ns, "qa", nil)
	promoteAndLatch(t, other) // the operator keeps serving
	// The pauses came and went before qa's promotion: once the operator is
	// idle, it has handled every event of them.
	op.idle(t)
	if paused(t, s) {
		t.Error("Stage left paused by a pause that is gone")
	}
	if r := stageRecord(t, s); len(r.Pauses) != 0 || r.Phase != latch.PhaseLatched {
		t.Errorf("record pauses %v, phase %s; want none and Latched", r.Pauses, r.Phase)
	}
}

// Deleting a paused Stage removes its series, and the garbage collector
// removes the pause its failure made (the pause's ownerReference). The
// person's pause stays, and pauses the Stage again if it comes back under
// the same name.
func TestStageDeletedWhilePaused(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	op := startOperator(t, ns, fastSettings())
	s := env.createStage(t, ns, "prod", map[string]string{api.PauseOnFailureAnnotation: "true"})
	promoteAndLatch(t, s)
	must(t, createPause(env.dev, pause(ns, "hold", "prod", "Manual")))
	_, err := s.FinishPromotion(ctx, "Failed")
	must(t, err)
	waitFor(t, "the failure's pause to be in force", func() bool {
		return len(stageRecord(t, s).Pauses) == 2 && op.metric("kargo_latch_stage_paused", "stage", "prod") == 1
	})

	must(t, env.dyn.Resource(kargo.StagesResource).Namespace(ns).Delete(context.Background(), "prod", metav1.DeleteOptions{}))
	waitFor(t, "the deleted Stage's series to go", func() bool {
		return op.metric("kargo_latch_stage_paused", "stage", "prod") == 0 &&
			op.metric("kargo_latch_stage_phase", "stage", "prod") == 0
	})
	waitFor(t, "the garbage collector to delete the failure's pause", func() bool {
		left := env.listPauses(t, ns)
		return len(left) == 1 && left[0].GetName() == "hold"
	})
	waitFor(t, "the person's pause to report its Stage missing", func() bool {
		return pauseCondition(t, ns, "hold") == "False/StageNotFound"
	})

	again := env.createStage(t, ns, "prod", nil)
	waitPaused(t, again, true)
	if r := stageRecord(t, again); !slices.Equal(r.Pauses, []string{"hold"}) {
		t.Errorf("the new Stage's record names pauses %v, want only [hold]", r.Pauses)
	}
}

// Annotations beyond the API server's 256 KB limit are refused before the
// operator sees them; large foreign annotations under the limit are dropped
// from the operator's cache and change nothing.
func TestHugeAnnotations(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	startOperator(t, ns, fastSettings())
	_, err := env.kargo.CreateStage(ctx, ns, "huge", map[string]string{"example.com/blob": strings.Repeat("x", 1<<20)})
	if !apierrors.IsInvalid(err) {
		t.Errorf("a Stage with 1 MB of annotations: %v, want Invalid from the API server", err)
	}
	big := env.createStage(t, ns, "big", map[string]string{"example.com/blob": strings.Repeat("x", 200<<10)})
	promoteAndLatch(t, big)
}

// Kargo's own schemas refuse a Stage without spec and a Promotion without
// spec.stage, so the operator never sees them; the Promotion handler ignores
// one without a Stage anyway (kargo.Promotion.Stage is empty).
func TestMalformedKargoObjectsAreRefused(t *testing.T) {
	t.Parallel()
	if !strings.Contains(env.cluster.CRDSource, "real") {
		t.Skip("needs Kargo's real CRDs (../shared/kargo-crds); the stand-in CRDs validate nothing")
	}
	ns := env.newProject(t)
	noSpec := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kargo.GroupVersion.String(), "kind": "Stage", "metadata": map[string]any{"name": "bare", "namespace": ns},
	}}
	if _, err := env.dyn.Resource(kargo.StagesResource).Namespace(ns).Create(ctx, noSpec, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("a Stage without spec: %v, want Invalid", err)
	}
	noStage := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kargo.GroupVersion.String(), "kind": "Promotion", "metadata": map[string]any{"name": "lost", "namespace": ns},
		"spec": map[string]any{"freight": "abc", "steps": []any{map[string]any{"uses": "argocd-update"}}},
	}}
	if _, err := env.dyn.Resource(kargo.PromotionsResource).Namespace(ns).Create(ctx, noStage, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Errorf("a Promotion without spec.stage: %v, want Invalid", err)
	}
}

// A verification that fails with an AnalysisRun's whole output as its
// message (100 KB) fails the latched Stage at once and pauses it exactly
// once: the record bounds every message, so it can still be stored.
func TestLongVerificationMessageFailsAndPausesOnce(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	settings := fastSettings()
	settings.PauseOnFailure = true
	op := startOperator(t, ns, settings)
	s := env.createStage(t, ns, "prod", nil)
	promoteAndLatch(t, s)
	long := strings.Repeat("metric \"error-rate\" assessed Failed: 0.31 > 0.05; ", 2000) // ~100 KB
	_, err := s.SetVerification(ctx, "Failed", long)
	must(t, err)
	waitPaused(t, s, true)
	r := stageRecord(t, s)
	if r.Phase != latch.PhaseFailed || r.Failure.Reason != latch.ReasonVerificationFailed {
		t.Fatalf("phase %s, failure %+v; want Failed with VerificationFailed", r.Phase, r.Failure)
	}
	if n := len(r.Failure.Message); n > latch.MaxMessage {
		t.Errorf("failure message kept %d bytes, want at most %d", n, latch.MaxMessage)
	}
	// The same failure judged again, by a sync of the unchanged Stage, adds
	// nothing.
	op.processed(t, "a nudge of the failed Stage", nudge(s))
	if pauses := env.listPauses(t, ns); len(pauses) != 1 {
		t.Errorf("%d StagePauses for one failure, want 1", len(pauses))
	}
}

// A Stage listing more Applications than the per-App latch handles is
// latched on its aggregate health alone, with one Warning and a metric; the
// rest of the operator is unaffected.
func TestTooManyApplicationsFallsBackToTheAggregate(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	op := startOperator(t, ns, fastSettings())
	apps := make([]driver.App, latch.MaxApps+1)
	names := make([]string, len(apps))
	for i := range apps {
		names[i] = fmt.Sprintf("app-%03d", i)
		apps[i] = driver.App{Name: names[i], Health: "Healthy"}
	}
	s := env.createStage(t, ns, "wide", nil, driver.WithApps(names...))
	_, err := s.StartPromotion(ctx)
	must(t, err)
	_, err = s.FinishPromotion(ctx, "Succeeded")
	must(t, err)
	// Every App Healthy at once under a Progressing aggregate would latch a
	// Stage of fewer Apps.
	must(t, s.SetAppsHealth(ctx, kargo.HealthProgressing, apps...))
	ev := waitEvent(t, s, api.ReasonTooManyApps)
	if ev.Type != "Warning" || !strings.Contains(ev.Message, "aggregate") {
		t.Errorf("Event %s %q; want a Warning that says the aggregate counts", ev.Type, ev.Message)
	}
	if got := op.metric("kargo_latch_invalid_input_total", "input", "apps"); got != 1 {
		t.Errorf("invalid_input_total{input=apps} = %v, want 1", got)
	}
	// The Warning is emitted before the record of the same sync is stored.
	op.idle(t)
	if r := stageRecord(t, s); r.Phase != latch.PhasePromoted || len(r.AppsHealthy) != 0 {
		t.Errorf("phase %s with %d Apps recorded; want Promoted and none", r.Phase, len(r.AppsHealthy))
	}
	must(t, s.SetAppsHealth(ctx, kargo.HealthHealthy, apps...))
	if r := waitPhase(t, s, latch.PhaseLatched); r.LatchedBy != latch.LatchedByStage {
		t.Errorf("latched by %q, want %q", r.LatchedBy, latch.LatchedByStage)
	}
	if n := len(env.stageEvents(t, s)[api.ReasonTooManyApps]); n != 1 {
		t.Errorf("%d TooManyApplications Events, want 1", n)
	}
}

// TestGarbageRecordIsKept: a person's hand edit leaves a failed, paused
// Stage's record unreadable. The operator starts over from the Stage's
// status, as the contract says, but loses nothing: the write of the fresh
// record keeps the garbage, verbatim, in kargo-latch.io/invalid-state; the
// failure's pause still covers the Stage, and the fresh record names it.
func TestGarbageRecordIsKept(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	op := startOperator(t, ns, fastSettings())
	s := env.createStage(t, ns, "prod", map[string]string{api.PauseOnFailureAnnotation: "true"})
	promoteAndLatch(t, s)
	_, err := s.FinishPromotion(ctx, "Failed")
	must(t, err)
	failed := waitPhase(t, s, latch.PhaseFailed)
	waitPaused(t, s, true)
	if failed.Failure.Pause == "" {
		t.Fatalf("failure %+v made no pause", failed.Failure)
	}

	u, err := s.Get(ctx)
	must(t, err)
	garbage := strings.Replace(u.GetAnnotations()[api.StateAnnotation], `"phase":"Failed"`, `"phase":"Failed`, 1)
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{api.StateAnnotation: garbage}}})
	must(t, err)
	_, err = env.dyn.Resource(kargo.StagesResource).Namespace(ns).Patch(ctx, s.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	must(t, err)

	ev := waitEvent(t, s, api.ReasonInvalidState)
	if ev.Type != "Warning" || !strings.Contains(ev.Message, kargo.InvalidStateAnnotation) {
		t.Errorf("InvalidState Event %s %q, want a Warning naming %s", ev.Type, ev.Message, kargo.InvalidStateAnnotation)
	}
	var kept string
	waitFor(t, "a fresh record beside the kept garbage", func() bool {
		u, err := s.Get(ctx)
		must(t, err)
		_, err = latch.Decode(u.GetAnnotations()[api.StateAnnotation])
		kept = u.GetAnnotations()[kargo.InvalidStateAnnotation]
		return err == nil && kept != ""
	})
	op.idle(t)
	if kept != garbage {
		t.Errorf("%s = %q, want the garbage record %q", kargo.InvalidStateAnnotation, kept, garbage)
	}
	if r := stageRecord(t, s); !slices.Contains(r.Pauses, failed.Failure.Pause) || !paused(t, s) {
		t.Errorf("fresh record's pauses %q (paused label %v), want the failure's pause %s still covering the Stage", r.Pauses, paused(t, s), failed.Failure.Pause)
	}
	if n := op.metric("kargo_latch_invalid_input_total", "stage", s.Name, "input", "state"); n != 1 {
		t.Errorf("kargo_latch_invalid_input_total{input=\"state\"} = %v, want 1", n)
	}
}

// annotationLimit is the API server's limit on an object's annotations,
// keys and values together (apimachinery's TotalAnnotationSizeLimitB).
const annotationLimit = 256 << 10

// TestGarbageRecordKeptWithinTheAnnotationLimit: on the real API server and
// its real limit, a garbage record of 255.8 KiB is kept in part (at most 16
// KiB, its length and hash in a first line), so that the fresh record is
// stored; kept whole, every store would be refused (422). A garbage record
// on a Stage whose other annotations leave no room for it at all is
// dropped: the API server's refusal is told from any other, the fresh
// record is stored without it, and a Warning says so.
func TestGarbageRecordKeptWithinTheAnnotationLimit(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	op := startOperator(t, ns, fastSettings())
	large, full := env.createStage(t, ns, "large", nil), env.createStage(t, ns, "full", nil)
	promoteAndLatch(t, large)
	promoteAndLatch(t, full)
	op.idle(t)

	// Each person's edit leaves the Stage's annotations within the limit,
	// the second exactly at it.
	largeGarbage := `{"version":1,"phase":"Failed","note":"` + strings.Repeat("x", annotationLimit-len(api.StateAnnotation)-300)
	fullGarbage := `{"version":1,"phase":"Failed","note":"` + strings.Repeat("x", 4000)
	const blobKey = "example.com/blob"
	blob := strings.Repeat("x", annotationLimit-len(api.StateAnnotation)-len(fullGarbage)-len(blobKey))
	for s, annotations := range map[string]map[string]string{
		large.Name: {api.StateAnnotation: largeGarbage},
		full.Name:  {api.StateAnnotation: fullGarbage, blobKey: blob},
	} {
		patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": annotations}})
		must(t, err)
		_, err = env.dyn.Resource(kargo.StagesResource).Namespace(ns).Patch(ctx, s, types.MergePatchType, patch, metav1.PatchOptions{})
		must(t, err)
	}
	for _, s := range []*driver.Stage{large, full} {
		waitFor(t, "a fresh record on "+s.Name, func() bool {
			u, err := s.Get(ctx)
			must(t, err)
			r, err := latch.Decode(u.GetAnnotations()[api.StateAnnotation])
			return err == nil && r.Phase == latch.PhaseLatched
		})
	}
	op.idle(t)

	u, err := large.Get(ctx)
	must(t, err)
	kept := u.GetAnnotations()[kargo.InvalidStateAnnotation]
	header, prefix, _ := strings.Cut(kept, "\n")
	if len(kept) > 16<<10 || !strings.HasPrefix(largeGarbage, prefix) || !strings.Contains(header, fmt.Sprintf(" of %d bytes, sha256 ", len(largeGarbage))) {
		t.Errorf("%s keeps %d bytes, first line %q; want at most 16 KiB: a line naming the %d bytes, then their beginning", kargo.InvalidStateAnnotation, len(kept), header, len(largeGarbage))
	}

	u, err = full.Get(ctx)
	must(t, err)
	if _, ok := u.GetAnnotations()[kargo.InvalidStateAnnotation]; ok || u.GetAnnotations()[blobKey] != blob {
		t.Errorf("%s on a full Stage: %s present %v, the other annotation kept %v; want absent, kept", full.Name, kargo.InvalidStateAnnotation, ok, u.GetAnnotations()[blobKey] == blob)
	}
	var dropped bool
	for _, ev := range env.stageEvents(t, full)[api.ReasonInvalidState] {
		dropped = dropped || strings.Contains(ev.Message, "could not be kept") && strings.Contains(ev.Message, "262144 bytes")
	}
	if !dropped {
		t.Errorf("no InvalidState Warning on %s saying the garbage could not be kept, quoting the API server's limit", full.Name)
	}
	for _, s := range []*driver.Stage{large, full} {
		if n := op.metric("kargo_latch_invalid_input_total", "stage", s.Name, "input", "state"); n != 1 {
			t.Errorf("%s: kargo_latch_invalid_input_total{input=\"state\"} = %v, want 1", s.Name, n)
		}
	}
}
