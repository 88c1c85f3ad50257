package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// TestReliabilityKillScenario runs the reliability scenario while the
// operator binary is killed with SIGKILL 20 times.
func TestReliabilityKillScenario(t *testing.T) {
	t.Parallel()
	ns, wideNS := env.newProject(t), env.newProject(t)
	op := newMeteredProcess(t, env.operator, scenarioArgs(ns, wideNS)...)
	op.start()
	const killsWanted = 20
	var kills atomic.Int64
	var killer sync.WaitGroup
	var restartErr error
	killer.Go(func() {
		for kills.Load() < killsWanted {
			time.Sleep(time.Duration(200+rand.IntN(600)) * time.Millisecond) //nolint:gosec // the fault's timing (jitter), not a wait
			op.kill()
			kills.Add(1)
			if restartErr = op.launch(); restartErr != nil {
				return
			}
		}
	})
	reliabilityScenario(t, env, ns, wideNS, op, func() string {
		killer.Wait()
		if restartErr != nil {
			t.Errorf("restarting the operator: %v", restartErr)
		}
		return fmt.Sprintf("%d SIGKILLs", kills.Load())
	})
}

// TestReliabilityLeaderLoss runs the same scenario with two replicas under
// leader election, and kills the leader with SIGKILL in the middle of it.
func TestReliabilityLeaderLoss(t *testing.T) {
	t.Parallel()
	ns, wideNS := env.newProject(t), env.newProject(t)
	args := append(scenarioArgs(ns, wideNS), "--leader-elect", "--leader-election-namespace", "kargo-latch", "--leader-election-id", "e2e-"+ns)
	leader, standby := newMeteredProcess(t, env.operator, args...), newMeteredProcess(t, env.operator, args...)
	leader.start()
	waitFor(t, "the first replica to win the first election", func() bool { return leaseHolder("e2e-"+ns) != "" })
	standby.start()
	var failover time.Duration
	var done sync.WaitGroup
	done.Go(func() {
		time.Sleep(3 * time.Second) // the fault's timing, not a wait: mid-scenario
		before := leaseHolder("e2e-" + ns)
		leader.kill()
		killed := time.Now()
		_ = poller{limit: time.Minute, every: 100 * time.Millisecond}.wait("the standby to take the Lease", func() (bool, error) {
			return leaseHolder("e2e-"+ns) != before, nil
		})
		failover = time.Since(killed)
	})
	reliabilityScenario(t, env, ns, wideNS, standby, func() string {
		done.Wait()
		return fmt.Sprintf("the leader SIGKILLed mid-scenario, the standby took the Lease %v later", failover.Round(time.Millisecond))
	})
}

func scenarioArgs(ns, wideNS string) []string {
	return []string{"--namespace", ns, "--namespace", wideNS, "--degraded-grace", "1s", "--latch-deadline", "1m",
		"--pause-on-failure", "--health-probe-bind-address", "0"}
}

// reliabilityScenario runs 200 Stages through latches, flaps, failures,
// degradations, manual and project-wide pauses and resumes while the
// caller disrupts the operator, then compares every Stage's end state with
// the model oracle: no lost latch, no lost or spurious pause, and exactly
// one StagePaused Event per pause. disrupted waits for the disruption to
// end and describes it; last is the operator process that runs after it
// (the one that leads, under leader election).
func reliabilityScenario(t *testing.T, w *world, ns, wideNS string, last *process, disrupted func() string) {
	t.Helper()
	const n, wide = 200, 20
	stages := make([]*driver.Stage, n)
	for i := range stages {
		stages[i] = w.createStage(t, ns, fmt.Sprintf("s%03d", i), nil)
	}
	wideStages := make([]*driver.Stage, wide)
	for i := range wideStages {
		wideStages[i] = w.createStage(t, wideNS, fmt.Sprintf("w%02d", i), nil)
	}
	// The stories run on goroutines of their own: they return their errors.
	stories := &scenarioStories{w: w, ns: ns, slow: poller{limit: 2 * time.Minute, every: 150 * time.Millisecond}}
	errs := make([]error, n+1)
	var wg sync.WaitGroup
	work := make(chan int)
	for range 12 {
		wg.Go(func() {
			for i := range work {
				errs[i] = stories.play(i%kinds, stages[i])
			}
		})
	}
	wg.Go(func() { errs[n] = stories.pauseProjectWide(wideNS, wideStages) })
	for i := range stages {
		work <- i
	}
	close(work)
	wg.Wait()
	disruption := disrupted()
	t.Logf("disruption: %s", disruption)
	if err := errors.Join(errs...); err != nil {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	// The run after the disruption has judged every Stage: a pause, record
	// or Event it would make again is made by now.
	last.caughtUp(t)
	// A StagePaused Event is made beside the record that pauses the Stage:
	// one the last SIGKILL cut short is made by the next process's first
	// sync of that Stage, which may come after the end state is reached.
	w.waitPausedEvents(t, stages, wideStages)

	var lostLatches, lostPauses, spurious, badEvents int
	for i, s := range stages {
		kind := i % kinds
		want := oracle(kind)
		got := stageRecord(t, s)
		if got.Phase != want.Phase || (want.Failure != nil) != (got.Failure != nil) ||
			(want.Failure != nil && got.Failure.Reason != want.Failure.Reason) {
			lostLatches++
			t.Errorf("%s (kind %d): phase %s, failure %+v; the oracle says %s, %+v", s.Name, kind, got.Phase, got.Failure, want.Phase, want.Failure)
		}
		wantPaused := kind == kindPromotionFails || kind == kindDegrades || kind == kindManualPause
		if model, got := contractOutcomes[kind], outcomeOf(got, paused(t, s)); got != model {
			lostLatches++
			t.Errorf("%s (kind %d): ended %+v; the contract's rules say %+v", s.Name, kind, got, model)
		}
		switch isPaused, pauses := paused(t, s), w.pausesNaming(t, ns, s.Name); {
		case wantPaused && (!isPaused || pauses != 1):
			lostPauses++
			t.Errorf("%s (kind %d): paused %v with %d StagePauses, want paused by exactly 1", s.Name, kind, isPaused, pauses)
		case !wantPaused && (isPaused || pauses != 0):
			spurious++
			t.Errorf("%s (kind %d): paused %v with %d StagePauses, want none", s.Name, kind, isPaused, pauses)
		}
		wantEvents := 1
		if kind == kindFlapper {
			wantEvents = 0
		}
		if got := w.eventCount(t, s, api.ReasonStagePaused); got != wantEvents {
			badEvents++
			t.Errorf("%s (kind %d): %d StagePaused Events, want %d", s.Name, kind, got, wantEvents)
		}
	}
	for _, s := range wideStages {
		if paused(t, s) {
			spurious++
			t.Errorf("%s still paused after the project-wide resume", s.Name)
		}
		if got := w.eventCount(t, s, api.ReasonStagePaused); got != 1 {
			badEvents++
			t.Errorf("%s: %d StagePaused Events for one project-wide pause, want 1", s.Name, got)
		}
	}
	t.Logf("%d Stages + %d under a project-wide pause, %s: %d lost latches, %d lost pauses, %d spurious pauses, %d wrong StagePaused Event counts",
		n, wide, disruption, lostLatches, lostPauses, spurious, badEvents)
}

// pausesNaming counts the StagePauses whose spec names the Stage, however
// they were made.
func (w *world) pausesNaming(t *testing.T, ns, stage string) int {
	t.Helper()
	n := 0
	for _, p := range w.listPauses(t, ns) {
		if got, _, _ := unstructured.NestedString(p.Object, "spec", "stage"); got == stage {
			n++
		}
	}
	return n
}

// waitPausedEvents waits, for at most 20 s, until every Stage of the
// scenario has as many StagePaused Events as its kind wants; the checks
// that follow report any that do not.
func (w *world) waitPausedEvents(t *testing.T, stages, wideStages []*driver.Stage) {
	t.Helper()
	want := map[string]int{}
	for i, s := range stages {
		if i%kinds != kindFlapper {
			want[s.Namespace+"/"+s.Name] = 1
		}
	}
	for _, s := range wideStages {
		want[s.Namespace+"/"+s.Name] = 1
	}
	namespaces := map[string]bool{}
	for _, s := range append(slices.Clone(stages), wideStages...) {
		namespaces[s.Namespace] = true
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		got := map[string]int{}
		for ns := range namespaces {
			list, err := w.kube.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=" + api.ReasonStagePaused})
			must(t, err)
			for _, e := range list.Items {
				got[ns+"/"+e.InvolvedObject.Name]++
			}
		}
		if maps.Equal(got, want) {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
}
