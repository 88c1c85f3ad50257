package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// TestExactlyOncePauseAcrossKills kills the operator with SIGKILL at random
// moments while Stages fail, and checks that each failure still yields
// exactly one StagePause and one StagePaused Event, and that a pause a
// person deleted is never made again.
func TestExactlyOncePauseAcrossKills(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	op := newMeteredProcess(t, env.operator, "--namespace", ns, "--degraded-grace", "1s", "--latch-deadline", "1m",
		"--health-probe-bind-address", "0", "-v", "2")
	op.start()

	const n = 8
	stages := make([]*driver.Stage, n)
	for i := range stages {
		stages[i] = env.createStage(t, ns, fmt.Sprintf("s%d", i), map[string]string{api.PauseOnFailureAnnotation: "true"})
	}

	stop := make(chan struct{})
	var kills atomic.Int64
	var killer sync.WaitGroup
	var restartErr error
	killer.Go(func() {
		for i := 0; ; i++ {
			if i%2 == 1 && !op.awaitSync(stop) {
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Duration(100+rand.IntN(500)) * time.Millisecond): //nolint:gosec // test jitter, not security
			}
			op.kill()
			kills.Add(1)
			if restartErr = op.launch(); restartErr != nil {
				return
			}
		}
	})

	// Half the Stages fail their promotion, half degrade past the grace.
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, s := range stages {
		wg.Go(func() { errs[i] = failAndPause(s, i%2 == 0) })
	}
	wg.Wait()
	time.Sleep(time.Second) // the fault's timing, not a wait: a few more kills after the last pause
	close(stop)
	killer.Wait()
	must(t, restartErr)
	must(t, errors.Join(errs...))
	t.Logf("the operator was killed %d times during the scenario", kills.Load())
	if kills.Load() < 2 {
		t.Errorf("the operator was killed %d times, want several: the scenario proves nothing", kills.Load())
	}
	// The last run has judged every Stage: a pause or Event it would make
	// again is made by now.
	op.caughtUp(t)

	for i, s := range stages {
		r := stageRecord(t, s)
		want := latch.ReasonPromotionFailed
		if i%2 == 1 {
			want = latch.ReasonDegraded
		}
		if r.Phase != latch.PhaseFailed || r.Failure.Reason != want {
			t.Errorf("%s: phase %s, failure %+v; want Failed with %s", s.Name, r.Phase, r.Failure, want)
		}
		if got := pausesFor(t, ns, s.Name); got != 1 {
			t.Errorf("%s: %d StagePauses, want exactly 1", s.Name, got)
		}
		if got := env.eventCount(t, s, api.ReasonStagePaused); got != 1 {
			t.Errorf("%s: %d StagePaused Events, want exactly 1", s.Name, got)
		}
	}

	// A person resumes one Stage; a restarted operator must not pause it
	// again for the same failure.
	resumed := stages[0]
	must(t, deletePause(env.lead, ns, stageRecord(t, resumed).Failure.Pause))
	waitPaused(t, resumed, false)
	op.kill()
	op.start()
	op.caughtUp(t)
	if got := pausesFor(t, ns, resumed.Name); got != 0 {
		t.Errorf("after a resume and a restart, %s has %d StagePauses, want 0", resumed.Name, got)
	}
	if paused(t, resumed) {
		t.Errorf("%s is paused again after a resume and a restart", resumed.Name)
	}
}

// failAndPause latches s, fails it (by its promotion, or by its health
// past the grace) and waits for its pause. It runs outside the test's
// goroutine and returns its errors.
func failAndPause(s *driver.Stage, byPromotion bool) error {
	_, err := playLatch(s)
	if err == nil && byPromotion {
		_, err = s.FinishPromotion(ctx, "Failed")
	} else if err == nil {
		err = s.SetHealth(ctx, kargo.HealthUnhealthy)
	}
	if err == nil {
		err = pollPaused(s, true)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", s.Name, err)
	}
	return nil
}

func pausesFor(t *testing.T, ns, stage string) int {
	t.Helper()
	l, err := env.dyn.Resource(v1alpha1.StagePausesResource).Namespace(ns).List(context.Background(),
		metav1.ListOptions{LabelSelector: v1alpha1.StageLabel + "=" + stage})
	must(t, err)
	return len(l.Items)
}
