package e2e

import (
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// A project's namespace is deleted while Kargo is still writing to its
// Stages and while the operator is pausing some of them. kube-controller-
// manager's namespace controller empties and removes it: nothing of ours
// holds it up (no finalizers), the operator neither exits nor keeps
// retrying, every series of the project goes, and a project made again
// under the same name starts afresh.
func TestNamespaceDeletedMidScenario(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	op := startOperator(t, ns, fastSettings())
	const n = 20
	stages := make([]*driver.Stage, n)
	for i := range stages {
		stages[i] = env.createStage(t, ns, fmt.Sprintf("s%02d", i), map[string]string{api.PauseOnFailureAnnotation: "true"})
		promoteAndLatch(t, stages[i])
	}
	must(t, createPause(env.dev, pause(ns, "hold", "s01", "Manual")))
	waitPaused(t, stages[1], true)

	// Kargo keeps working: promotions fail (each asks for a pause) and
	// health flaps, until the namespace is gone. Errors are expected once
	// it terminates.
	stop := make(chan struct{})
	var kargoWrites sync.WaitGroup
	kargoWrites.Go(func() {
		for round := 0; ; round++ {
			for i, s := range stages {
				select {
				case <-stop:
					return
				default:
				}
				if i%4 == round%4 {
					_, _ = s.FinishPromotion(ctx, "Failed")
				} else {
					_ = s.SetHealth(ctx, []string{kargo.HealthProgressing, kargo.HealthHealthy}[round%2])
				}
			}
		}
	})
	time.Sleep(500 * time.Millisecond) // the scenario's timing, not a wait: mid-scenario, pauses are being made
	deleted := time.Now()
	must(t, env.kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}))
	waitLong(t, "the namespace controller to remove the namespace", 90*time.Second, func() bool {
		_, err := env.kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	close(stop)
	kargoWrites.Wait()
	t.Logf("the namespace was gone %v after its deletion", time.Since(deleted).Round(time.Millisecond))

	waitFor(t, "the project's series to go and the queue to drain", func() bool {
		return op.metric("kargo_latch_stage_phase") == 0 && op.metric("kargo_latch_stage_paused") == 0 &&
			op.metric("kargo_latch_workqueue_depth", "name", "stages") == 0
	})
	// The deletions handled, nothing is left to do: retries that go on show
	// within a window, the first ones milliseconds apart.
	op.idle(t)
	retries := op.metric("kargo_latch_workqueue_retries_total")
	time.Sleep(time.Second) // an observation window, not a wait for an event
	if again := op.metric("kargo_latch_workqueue_retries_total"); again != retries {
		t.Errorf("the operator still retries after the namespace is gone: %v then %v retries", retries, again)
	}
	select {
	case <-op.done:
		t.Fatal("the operator stopped")
	default:
	}

	_, err := env.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	must(t, err)
	reborn := env.createStage(t, ns, "s01", nil)
	r := promoteAndLatch(t, reborn)
	if paused(t, reborn) || len(r.Pauses) != 0 || len(env.listPauses(t, ns)) != 0 {
		t.Errorf("the new project's Stage is paused (record pauses %v): something of the old project survived", r.Pauses)
	}
	if r.Phase != latch.PhaseLatched {
		t.Errorf("the new project's Stage: phase %s, want Latched", r.Phase)
	}
	// The gauge is read from the operator's cache, which sees its own write
	// after the API server does.
	waitFor(t, "the new project's Stage to be reported Latched", func() bool {
		return op.metric("kargo_latch_stage_phase", "stage", "s01", "phase", string(latch.PhaseLatched)) == 1
	})
}
