package e2e

import (
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/latch"
)

// The StagePaused Event is made beside the store of the record that pauses
// the Stage. When its create fails and the store succeeds, the Stage is
// paused and labeled at once, and the Event follows, once, as soon as
// Events can be written again.
func TestStagePausedEventSurvivesRefusedCreates(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	var refuseEvents atomic.Bool
	var refused atomic.Int64
	op := startOperatorWith(t, env.operator, ns, fastSettings(), refusing(func(r *http.Request) error {
		if refuseEvents.Load() && r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/events") {
			refused.Add(1)
			return errors.New("injected: the Event create is refused")
		}
		return nil
	}))
	prod := env.createStage(t, ns, "prod", map[string]string{api.PauseOnFailureAnnotation: "true"})
	promoteAndLatch(t, prod)

	refuseEvents.Store(true)
	_, err := prod.FinishPromotion(ctx, "Failed")
	must(t, err)
	waitPaused(t, prod, true)
	if r := stageRecord(t, prod); r.Failure == nil || r.PausedBy == nil || r.PausedBy.Name != r.Failure.Pause {
		t.Errorf("record failure %+v, pausedBy %+v; want the failure's pause to be what paused the Stage", r.Failure, r.PausedBy)
	}
	waitFor(t, "the operator to retry the refused Event", func() bool { return refused.Load() >= 3 })
	if n := env.eventCount(t, prod, api.ReasonStagePaused); n != 0 {
		t.Fatalf("%d StagePaused Events while every create is refused", n)
	}

	refuseEvents.Store(false)
	waitEvent(t, prod, api.ReasonStagePaused)
	op.idle(t)
	if n := env.eventCount(t, prod, api.ReasonStagePaused); n != 1 {
		t.Errorf("%d StagePaused Events, want 1", n)
	}
	if n := len(env.listPauses(t, ns)); n != 1 {
		t.Errorf("%d StagePauses, want 1", n)
	}
	if r := stageRecord(t, prod); r.Phase != latch.PhaseFailed {
		t.Errorf("phase %s, want Failed", r.Phase)
	}
}
