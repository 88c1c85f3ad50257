package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/latch"
)

// A Stage made and failed while no replica leads (a failover, an upgrade,
// a crash loop) has no record when the operator first sees it: its failure
// is new, and pauses it, once. A Stage that failed days before a first
// install is history: recorded, never acted on.
func TestRecordlessStageFailures(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	onFailure := map[string]string{api.PauseOnFailureAnnotation: "true"}
	fresh := env.createStage(t, ns, "fresh", onFailure)
	_, err := fresh.FinishPromotion(ctx, "Failed")
	must(t, err)
	daysAgo := env.kargo.WithClock(func() time.Time { return time.Now().Add(-72 * time.Hour) })
	old, err := daysAgo.CreateStage(context.Background(), ns, "old", onFailure)
	must(t, err)
	_, err = old.FinishPromotion(ctx, "Failed")
	must(t, err)

	settings := fastSettings()
	settings.NewFailureWindow = 15 * time.Minute
	op := startOperator(t, ns, settings)
	waitPaused(t, fresh, true)
	r := waitPhase(t, old, latch.PhaseFailed)
	op.idle(t)
	if r.Failure.Reason != latch.ReasonPromotionFailed || r.Failure.Pause != "" {
		t.Errorf("old failure %+v; want PromotionFailed recorded without a pause", r.Failure)
	}
	if paused(t, old) {
		t.Error("a failure from days before the operator looked paused the Stage")
	}
	if n := len(env.listPauses(t, ns)); n != 1 {
		t.Errorf("%d StagePauses, want exactly 1 (the fresh failure's)", n)
	}
	if n := env.eventCount(t, fresh, api.ReasonStagePaused); n != 1 {
		t.Errorf("%d StagePaused Events on the fresh Stage, want 1", n)
	}
}
