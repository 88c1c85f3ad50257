package e2enode

import (
	"context"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// failoverLimit is docs/reliability.md's takeover after a leader dies
// without releasing the Lease: LeaseDuration+RetryPeriod (14s), with room
// for the node to start what it restarts.
const failoverLimit = 45 * time.Second

// TestKilledContainerIsRestarted: the leader's process is killed
// (SIGKILL, on the node, not through the API) while a failure is in
// flight. The kubelet restarts the container (its restart count grows, its
// last state is the kill), the Pod is Ready again, the failure pauses its
// Stage once, and the Stage latched before keeps its latch.
func TestKilledContainerIsRestarted(t *testing.T) {
	ctx := context.Background()
	project := env.newProject(t)
	latched := env.createStage(t, project, "latched")
	promoteAndLatch(t, latched)
	failing := env.createStage(t, project, "failing")
	promoteAndLatch(t, failing)

	leader := env.waitLeader(t, "", waitLimit)
	pod, err := env.kube.CoreV1().Pods(releaseNS).Get(ctx, leader, metav1.GetOptions{})
	must(t, err)
	restarts := pod.Status.ContainerStatuses[0].RestartCount
	pid := env.containerPID(t, leader)
	fail(t, failing)
	must(t, syscall.Kill(pid, syscall.SIGKILL))

	waitFor(t, "the kubelet to restart the killed container, and the Pod to be Ready", 2*time.Minute, func() (bool, error) {
		p, err := env.kube.CoreV1().Pods(releaseNS).Get(ctx, leader, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := p.Status.ContainerStatuses[0]
		return c.RestartCount == restarts+1 && ready(*p) && c.LastTerminationState.Terminated != nil, nil
	})
	p, err := env.kube.CoreV1().Pods(releaseNS).Get(ctx, leader, metav1.GetOptions{})
	must(t, err)
	if last := p.Status.ContainerStatuses[0].LastTerminationState.Terminated; last.ExitCode != 128+int32(syscall.SIGKILL) {
		t.Errorf("the restarted container's last state is exit %d (%s), want the kill's %d", last.ExitCode, last.Reason, 128+int32(syscall.SIGKILL))
	}
	waitPaused(t, failing, true, failoverLimit)
	exactlyOnePause(t, project, failing)
	r, err := record(latched)
	must(t, err)
	if r.Phase != latch.PhaseLatched {
		t.Errorf("the latched Stage is %s after the restart, want %s", r.Phase, latch.PhaseLatched)
	}
	must(t, env.waitDeployment(ctx, time.Minute))
}

// TestDeletedLeaderPodHandsOver: the leader Pod is deleted (as `kubectl
// delete pod` does, with its grace period) while Stages keep failing, one
// every failCadence whoever leads, from before the delete until after the
// standby leads. The standby leads within the documented time, every
// Stage is paused by exactly one StagePause, the new leader paused some of
// them, and the Deployment is back to two Ready Pods.
func TestDeletedLeaderPodHandsOver(t *testing.T) {
	ctx := context.Background()
	project := env.newProject(t)

	leader := env.waitLeader(t, "", waitLimit)
	logs := env.followPauses(t)
	failing := env.startChurn(t, project, "churn")
	failing.waitFailedSince(t, time.Time{})
	deleted := time.Now()
	must(t, env.kube.CoreV1().Pods(releaseNS).Delete(ctx, leader, metav1.DeleteOptions{}))
	next := env.waitLeader(t, leader, failoverLimit)
	took := time.Since(deleted)
	t.Logf("Pod %s leads %.1fs after %s was deleted", next, took.Seconds(), leader)
	failing.waitFailedSince(t, time.Now())
	failures := failing.finish(t)
	// A deleted Pod's operator releases the Lease as it stops; the
	// standby's next try (every 2s) takes it: never the 14s of a kill.
	if took > 14*time.Second {
		t.Errorf("the standby took %.1fs to lead, want under the 14s of docs/reliability.md", took.Seconds())
	}
	allPausedOnce(t, project, failures)
	counts := countByPod(t, failures, logs.pausedBy(t, failures), deleted)
	if counts[next] == 0 {
		t.Errorf("the new leader %s paused none of the %d Stages that failed through the handover", next, len(failures))
	}
	must(t, env.waitDeployment(ctx, 2*time.Minute))
}

// exactlyOnePause checks that s has one StagePause, once the leader has
// shown it handled what came before: a sentinel Stage that fails after s
// is paused too.
func exactlyOnePause(t *testing.T, project string, s *driver.Stage) {
	t.Helper()
	sentinel := env.createStage(t, project, "sentinel-"+s.Name)
	fail(t, sentinel)
	waitPaused(t, sentinel, true, failoverLimit)
	if got := env.pauses(t, s); len(got) != 1 {
		t.Errorf("Stage %s has StagePauses %v, want exactly 1", s.Name, got)
	}
}
