package e2e

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
)

// A Stage name may have 253 characters; a label value only 63. A failure of
// a Stage with a long name pauses it all the same (its pause's Stage label
// is shortened with a hash), the drain does without Kargo's Stage label on
// Promotions, and deleting the pause resumes the Stage.
func TestLongStageNamePausesAndResumes(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	startOperator(t, ns, fastSettings())
	name := strings.Repeat("payments-eu-west.", 5) + "prod" // 89 characters
	prod := env.createStage(t, ns, name, map[string]string{api.PauseOnFailureAnnotation: "true"})
	promoteAndLatch(t, prod)

	_, err := prod.FinishPromotion(ctx, "Failed")
	must(t, err)
	waitPaused(t, prod, true)
	pauses := env.listPauses(t, ns)
	if len(pauses) != 1 {
		t.Fatalf("%d StagePauses after one failure, want 1", len(pauses))
	}
	p := pauses[0]
	if got, want := p.GetLabels()[v1alpha1.StageLabel], v1alpha1.StageLabelValue(name); got != want || len(got) > 63 {
		t.Errorf("pause label %s = %q, want %q (63 characters at most)", v1alpha1.StageLabel, got, want)
	}
	if r := stageRecord(t, prod); r.Failure == nil || r.Failure.Pause != p.GetName() {
		t.Errorf("record failure %+v; want it to name pause %s", r.Failure, p.GetName())
	}

	must(t, env.dyn.Resource(v1alpha1.StagePausesResource).Namespace(ns).Delete(context.Background(), p.GetName(), metav1.DeleteOptions{}))
	waitPaused(t, prod, false)
	waitEvent(t, prod, api.ReasonStageResumed)
}
