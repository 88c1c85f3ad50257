package cli

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// personPromotion is a person's Promotion of the Stage prod, with the
// intent Kargo's webhook stamped on it: hold or resume of origin.
func personPromotion(name, phase, intent, origin string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kargo.GroupVersion.String(), "kind": "Promotion",
		"metadata": map[string]any{"name": name, "namespace": "project", "labels": map[string]any{kargo.StageLabel: "prod"}},
		"spec":     map[string]any{"stage": "prod", "freight": "f"},
	}}
	if phase != "" {
		u.Object["status"] = map[string]any{"phase": phase}
	}
	if intent != "" {
		u.SetAnnotations(map[string]string{intent: origin})
	}
	return u
}

func promotionsOf(us ...*unstructured.Unstructured) []promotion {
	out := make([]promotion, len(us))
	for i, u := range us {
		out[i] = promotionOf(u)
	}
	return out
}

// Review finding H2: Kargo shows a hold made or released by a person's
// Promotion only once it has reconciled the Stage after the Promotion was
// created (it overlays, per origin, the newest non-aborted intent newer
// than lastPromotion). A wait for resumed neither ends held while the
// release is on its way, nor ends resumed while a rollback's hold is.
func TestJudgeResumedWhileAHoldComesOrGoes(t *testing.T) {
	const images = "Warehouse/images"
	hold, resume := kargo.HoldIntentAnnotation, kargo.ResumeIntentAnnotation
	heldFrom1 := kargoView{last: promo1, lastPhase: promotionSucceeded, holds: rollbackHold}
	notHeld := kargoView{last: promo1, lastPhase: promotionSucceeded}
	for name, c := range map[string]struct {
		view       kargoView
		promotions []*unstructured.Unstructured
		want       outcome
		message    string
	}{
		"the candidate's promotion, not taken in yet": {view: heldFrom1, promotions: []*unstructured.Unstructured{personPromotion(promo2, "", resume, images)},
			want: waiting, message: "the Stage is not paused; Kargo has yet to take in promotion " + promo2 + ", which releases its hold on auto-promotion from Warehouse/images"},
		"the candidate's promotion, taken in": {view: notHeld, promotions: []*unstructured.Unstructured{personPromotion(promo2, promotionRunning, resume, images)},
			want: reached, message: "the Stage is not paused"},
		"a rollback's promotion, not taken in yet": {view: notHeld, promotions: []*unstructured.Unstructured{personPromotion(promo2, promotionPending, hold, images)},
			want: waiting, message: "the Stage is not paused; Kargo has yet to take in promotion " + promo2 + ", which makes it hold auto-promotion from Warehouse/images"},
		"a rollback's promotion, taken in": {view: heldFrom1, promotions: []*unstructured.Unstructured{personPromotion(promo2, promotionPending, hold, images)},
			want: held},
		"the candidate's promotion was aborted": {view: heldFrom1, promotions: []*unstructured.Unstructured{personPromotion(promo2, promotionAborted, resume, images)},
			want: held},
		"the release is older than the last promotion": {view: kargoView{last: promo2, lastPhase: promotionSucceeded, holds: rollbackHold},
			promotions: []*unstructured.Unstructured{personPromotion(promo1, promotionSucceeded, resume, images)}, want: held},
		"the newest intent wins: a rollback after the release": {view: heldFrom1,
			promotions: []*unstructured.Unstructured{personPromotion(promo2, promotionPending, resume, images), personPromotion(promo3, "", hold, images)}, want: held},
		"another origin's release": {view: heldFrom1, promotions: []*unstructured.Unstructured{personPromotion(promo2, "", resume, "Warehouse/charts")},
			want: held},
		"no intent (auto-promotion)": {view: notHeld, promotions: []*unstructured.Unstructured{personPromotion(promo2, "", "", "")},
			want: reached},
	} {
		t.Run(name, func(t *testing.T) {
			v := judge(forResumed, "", sighting{stage: prodStage(c.view, latch.Record{}), promotions: promotionsOf(c.promotions...)})
			if v.outcome != c.want || c.message != "" && v.message != c.message {
				t.Errorf("judge = %v %q,\nwant %v %q", v.outcome, v.message, c.want, c.message)
			}
		})
	}
}

// Review finding H2, in a wait: the Stage is held from P1, and a person
// has just promoted the candidate (P2, Pending, with Kargo's resume
// intent). The wait does not end until the Stage drops the hold, then
// exits 0. It used to exit 4 at once.
func TestWaitForResumedWhileTheHoldIsBeingReleased(t *testing.T) {
	t.Parallel()
	client := fakeClient(prodStage(kargoView{last: promo1, lastPhase: promotionSucceeded, holds: rollbackHold}, latch.Record{}),
		personPromotion(promo2, promotionPending, kargo.ResumeIntentAnnotation, "Warehouse/images"))
	w := startWait(t.Context(), client, waitOptions{condition: "resumed"})
	w.progressed(t, "the Stage is not paused; Kargo has yet to take in promotion "+promo2+", which releases its hold on auto-promotion from Warehouse/images")
	select {
	case err := <-w.done:
		t.Fatalf("the wait ended (%v) while Kargo still showed the hold it is releasing", err)
	default:
	}
	updateStage(t, client, prodStage(kargoView{last: promo1, lastPhase: promotionSucceeded}, latch.Record{}))
	if err := w.result(t); err != nil {
		t.Fatalf("wait: %v", err)
	}
	if got := w.stdout.String(); got != "stage project/prod: the Stage is not paused\n" {
		t.Errorf("stdout %q", got)
	}
}

// Review finding H2: before it exits 4, the wait reads the Stage anew: its
// watch may lag behind a Stage whose hold is gone. Here the watch of the
// Stage brings nothing after the first list.
func TestWaitForResumedReadsTheStageAnewBeforeExiting4(t *testing.T) {
	t.Parallel()
	client := fakeClient(prodStage(kargoView{holds: rollbackHold}, latch.Record{}), incidentPause())
	client.PrependWatchReactor("stages", func(k8stesting.Action) (bool, watch.Interface, error) {
		return true, watch.NewRaceFreeFake(), nil // a watch that lags for ever
	})
	w := startWait(t.Context(), client, waitOptions{condition: "resumed"})
	w.progressed(t, "the Stage is paused by StagePause inc-1")
	updateStage(t, client, prodStage(kargoView{}, latch.Record{})) // Kargo dropped the hold
	if err := client.Resource(v1alpha1.StagePausesResource).Namespace("project").Delete(t.Context(), "inc-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := w.result(t); err != nil {
		t.Fatalf("wait: %v, want exit 0 on the Stage read anew", err)
	}
	if got := w.stdout.String(); got != "stage project/prod: the Stage is not paused\n" {
		t.Errorf("stdout %q", got)
	}
}

// incidentPause is the StagePause project/inc-1 of the Stage prod, with
// the reason Incident.
func incidentPause() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "StagePause",
		"metadata": map[string]any{"name": "inc-1", "namespace": "project"},
		"spec":     map[string]any{"stage": "prod", "reason": "Incident"},
	}}
}

// A wait for resumed reads the Stage's Promotions by Kargo's stage label
// only.
func TestWaitForResumedWatchesTheStagesPromotions(t *testing.T) {
	t.Parallel()
	client := fakeClient(prodStage(kargoView{}, latch.Record{}), incidentPause())
	// Long enough to report progress on a busy machine before it times out.
	w := startWait(t.Context(), client, waitOptions{condition: "resumed", timeout: 3 * time.Second})
	w.progressed(t, "the Stage is paused by StagePause inc-1")
	if err := w.result(t); exitCode(err, true) != ExitTimeout {
		t.Fatalf("wait: %v, want a timeout", err)
	}
	listed := false
	for _, a := range client.Actions() {
		if a.GetResource() != kargo.PromotionsResource {
			continue
		}
		var labels string
		switch a := a.(type) {
		case k8stesting.ListAction:
			labels, listed = a.GetListRestrictions().Labels.String(), true
		case k8stesting.WatchAction:
			labels = a.GetWatchRestrictions().Labels.String()
		}
		if labels != kargo.StageLabel+"=prod" {
			t.Errorf("%s promotions with label selector %q, want %s=prod", a.GetVerb(), labels, kargo.StageLabel)
		}
	}
	if !listed {
		t.Error("the wait did not read the Stage's Promotions")
	}
	if strings.Contains(w.stderr.String(), "warning") {
		t.Errorf("stderr %q", w.stderr.String())
	}
}
