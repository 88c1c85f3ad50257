package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/latch"
)

// derivedPauseName computes, as any project member can from the Stage's
// status, the name the operator derives for the pause of a failed
// promotion (latch's pauseName).
func derivedPauseName(stage string, reason latch.FailureReason, promotion string) string {
	sum := sha256.Sum256([]byte(stage + "\x00" + string(reason) + "\x00" + promotion))
	return stage + "-" + strings.ToLower(string(reason)) + "-" + hex.EncodeToString(sum[:4])
}

// TestDecoyAtTheDerivedNameDoesNotStopThePause plays a person with only
// kargo-latch-pauser who pre-creates StagePauses at the names the operator
// will derive for prod's next failure, each covering a Stage that does not
// exist: the derived name and its first alternate, or the derived name and
// every alternate. The failure must still pause prod, under another name
// (the next alternate, or one the API server generates): the decoys are
// reported, never adopted, nothing resumes, and a restart makes no second
// pause.
func TestDecoyAtTheDerivedNameDoesNotStopThePause(t *testing.T) {
	t.Parallel()
	for _, decoys := range []int{2, 4} {
		t.Run(fmt.Sprintf("%d decoys", decoys), func(t *testing.T) {
			t.Parallel()
			decoyScenario(t, decoys)
		})
	}
}

func decoyScenario(t *testing.T, count int) {
	ns := env.newProject(t)
	op := startOperator(t, ns, fastSettings())
	prod := env.createStage(t, ns, "prod", map[string]string{api.PauseOnFailureAnnotation: "true"})
	promoteAndLatch(t, prod)

	promotion, err := prod.StartPromotion(ctx)
	must(t, err)
	derived := derivedPauseName("prod", latch.ReasonPromotionFailed, promotion)
	decoys := []string{derived}
	for attempt := 2; attempt <= count; attempt++ {
		decoys = append(decoys, fmt.Sprintf("%s-%d", derived, attempt))
	}
	for _, name := range decoys {
		must(t, createPause(env.dev, pause(ns, name, "nowhere", "Manual")))
	}

	_, err = prod.FinishPromotion(ctx, "Failed")
	must(t, err)
	waitPaused(t, prod, true)
	r := waitPhase(t, prod, latch.PhaseFailed)
	if r.Failure == nil || slices.Contains(decoys, r.Failure.Pause) || r.Failure.Pause == "" {
		t.Fatalf("record failure %+v: want it to name a pause that is not a decoy %v", r.Failure, decoys)
	}
	mine, err := env.dyn.Resource(v1alpha1.StagePausesResource).Namespace(ns).Get(context.Background(), r.Failure.Pause, metav1.GetOptions{})
	must(t, err)
	if stage, _, _ := unstructured.NestedString(mine.Object, "spec", "stage"); stage != "prod" {
		t.Errorf("the failure's pause %s covers %q, want prod", mine.GetName(), stage)
	}
	if refs := mine.GetOwnerReferences(); len(refs) != 1 || refs[0].Name != "prod" {
		t.Errorf("the failure's pause's ownerReferences = %+v, want the Stage prod", refs)
	}
	if got := mine.GetAnnotations()[v1alpha1.DerivedNameAnnotation]; got != derived {
		t.Errorf("the failure's pause's %s = %q, want %q", v1alpha1.DerivedNameAnnotation, got, derived)
	}
	switch want := fmt.Sprintf("%s-%d", derived, count+1); {
	case count < 4 && mine.GetName() != want:
		t.Errorf("the failure's pause is %s, want the next deterministic name %s", mine.GetName(), want)
	case count == 4 && (!strings.HasPrefix(mine.GetName(), derived+"-") || len(mine.GetName()) != len(derived)+6):
		// After the derived name and its 3 alternates: generateName, 5
		// characters after the dash.
		t.Errorf("the failure's pause is %s, want a name the API server generated from %s-", mine.GetName(), derived)
	}

	// Each decoy is reported once, by name, and counted.
	waitFor(t, "a PauseNameTaken Warning per decoy", func() bool {
		return len(env.stageEvents(t, prod)[api.ReasonPauseNameTaken]) == len(decoys)
	})
	for _, ev := range env.stageEvents(t, prod)[api.ReasonPauseNameTaken] {
		if !slices.ContainsFunc(decoys, func(d string) bool { return strings.Contains(ev.Message, "StagePause "+d+" ") }) {
			t.Errorf("PauseNameTaken names no decoy: %q", ev.Message)
		}
	}
	if got := op.metric("kargo_latch_pause_name_taken_total", "stage", "prod"); got != float64(len(decoys)) {
		t.Errorf("kargo_latch_pause_name_taken_total = %v, want %d", got, len(decoys))
	}

	// The failure stays paused: the gate refuses, and once the operator
	// has handled every event no sync resumed it. (The API server reads the
	// pause from an informer of its own: a dry run first.)
	waitShippedGateRefuses(t, ns, "prod")
	err = autoPromote(ns, "prod")
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), mine.GetName()) {
		t.Fatalf("Kargo's auto-promotion to prod: %v; want 403 naming %s", err, mine.GetName())
	}
	op.idle(t)
	if !paused(t, prod) {
		t.Error("prod lost its paused label")
	}
	if n := env.eventCount(t, prod, api.ReasonStageResumed); n != 0 {
		t.Errorf("%d StageResumed Events, want 0", n)
	}
	if got := op.metric("kargo_latch_resumes_total", "stage", "prod"); got != 0 {
		t.Errorf("kargo_latch_resumes_total = %v, want 0", got)
	}
	if r := stageRecord(t, prod); len(r.Pauses) != 1 || r.Pauses[0] != mine.GetName() {
		t.Errorf("record pauses %v, want [%s]", r.Pauses, mine.GetName())
	}
	for _, name := range decoys {
		if _, err := env.dyn.Resource(v1alpha1.StagePausesResource).Namespace(ns).Get(context.Background(), name, metav1.GetOptions{}); err != nil {
			t.Errorf("decoy %s: %v; the operator must leave people's objects alone", name, err)
		}
	}

	// A restart reads the record that names the pause, and makes no
	// second one.
	op.stop()
	op = startOperator(t, ns, fastSettings())
	waitIdle(t, op, 1) // it has judged prod: a second pause it would make is made
	if n := pausesFor(t, ns, "prod"); n != 1 {
		t.Errorf("%d operator pauses for prod after a restart, want 1", n)
	}
}
