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
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// The reliability scenario: what each Stage goes through, by kind.
const (
	kindFlapper        = iota // latch, then Progressing flaps
	kindPromotionFails        // latch, then a failed promotion: paused
	kindDegrades              // latch, then Unhealthy past the grace: paused
	kindManualPause           // latch, then a person pauses it
	kindResumed               // latch, an errored promotion pauses it, a person resumes
	kinds
)

// outcome is where a story ends: phase, failure reason, paused or not.
type outcome struct {
	phase   latch.Phase
	failure latch.FailureReason
	paused  bool
}

// contractOutcomes is where the contract's rules (contract.md, "The latch"
// and "Pauses") take each story, written from the contract and not from
// latch.Step: oracle catches wiring faults, this catches rule faults.
var contractOutcomes = map[int]outcome{
	// "After the latch, Progressing never changes the phase."
	kindFlapper: {phase: latch.PhaseLatched},
	// "lastPromotion Failed → the current cycle becomes Failed
	// (PromotionFailed)"; pause-on-failure: one StagePause.
	kindPromotionFails: {phase: latch.PhaseFailed, failure: latch.ReasonPromotionFailed, paused: true},
	// "Latched + Unhealthy → Degraded"; past the grace → Failed (Degraded).
	kindDegrades: {phase: latch.PhaseFailed, failure: latch.ReasonDegraded, paused: true},
	// "A Stage can be Latched and paused."
	kindManualPause: {phase: latch.PhaseLatched, paused: true},
	// Errored → Failed (PromotionErrored); deleting the pause resumes.
	kindResumed: {phase: latch.PhaseFailed, failure: latch.ReasonPromotionErrored},
}

// outcomeOf reads a record as an outcome.
func outcomeOf(r latch.Record, paused bool) outcome {
	o := outcome{phase: r.Phase, paused: paused}
	if r.Failure != nil {
		o.failure = r.Failure.Reason
	}
	return o
}

// oracle runs a kind's scenario through the latch state machine itself, the
// model, and returns the record the operator must end with.
func oracle(kind int) latch.Record {
	s := latch.Settings{LatchDeadline: time.Minute, DegradedGrace: time.Second, PauseOnFailure: true}
	t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	p1 := &latch.Promotion{Name: "p1", Phase: latch.PromotionSucceeded, FinishedAt: &t}
	seq := []latch.Observation{
		{Stage: "s"},
		{Stage: "s", LastPromotion: p1, FreightID: "F1"},
		{Stage: "s", LastPromotion: p1, FreightID: "F1", Health: latch.HealthProgressing},
		{Stage: "s", LastPromotion: p1, FreightID: "F1", Health: latch.HealthHealthy},
	}
	switch kind {
	case kindFlapper, kindManualPause:
		for range 3 {
			seq = append(seq, seq[2], seq[3])
		}
	case kindPromotionFails, kindResumed:
		phase := latch.PromotionFailed
		if kind == kindResumed {
			phase = latch.PromotionErrored
		}
		seq = append(seq, latch.Observation{Stage: "s", FreightID: "F1", Health: latch.HealthUnknown,
			LastPromotion: &latch.Promotion{Name: "p2", Phase: phase, FinishedAt: &t}})
	case kindDegrades:
		unhealthy := seq[3]
		unhealthy.Health = latch.HealthUnhealthy
		seq = append(seq, unhealthy, unhealthy)
	}
	var r latch.Record
	for i, o := range seq {
		r = latch.Step(s, r, o, t.Add(time.Duration(i)*2*time.Second)).Record
	}
	return r
}

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

// The two models of the reliability scenario agree: latch.Step, run over
// each story, ends where the contract's rules say.
func TestOracleAgreesWithTheContract(t *testing.T) {
	for kind := range kinds {
		r := oracle(kind)
		if got, want := outcomeOf(r, len(r.Pauses) > 0 || contractOutcomes[kind].paused), contractOutcomes[kind]; got.phase != want.phase || got.failure != want.failure {
			t.Errorf("kind %d: latch.Step ends %+v, the contract says %+v", kind, got, want)
		}
	}
}

// scenarioStories plays the stories of the reliability scenario. Each runs
// outside the test's goroutine and returns its error.
type scenarioStories struct {
	w    *world
	ns   string
	slow poller
}

// play takes s through the story of kind.
func (st *scenarioStories) play(kind int, s *driver.Stage) error {
	err := st.latch(s)
	if err == nil {
		err = st.after(kind, s)
	}
	if err != nil {
		return fmt.Errorf("%s (kind %d): %w", s.Name, kind, err)
	}
	return nil
}

func (st *scenarioStories) latch(s *driver.Stage) error {
	if _, err := s.FinishPromotion(ctx, "Succeeded"); err != nil {
		return err
	}
	for _, h := range []string{kargo.HealthProgressing, kargo.HealthHealthy} {
		if err := s.SetHealth(ctx, h); err != nil {
			return err
		}
	}
	return st.slow.wait(s.Name+" latched", func() (bool, error) {
		r, err := readRecord(s)
		return r.Phase == latch.PhaseLatched, err
	})
}

// after plays what follows the latch in a story of kind.
func (st *scenarioStories) after(kind int, s *driver.Stage) error {
	switch kind {
	case kindFlapper:
		for range 3 {
			for _, h := range []string{kargo.HealthProgressing, kargo.HealthHealthy} {
				if err := s.SetHealth(ctx, h); err != nil {
					return err
				}
			}
		}
		return nil
	case kindPromotionFails:
		if _, err := s.FinishPromotion(ctx, "Failed"); err != nil {
			return err
		}
		return st.waitPaused(s, true, "paused")
	case kindDegrades:
		if err := s.SetHealth(ctx, kargo.HealthUnhealthy); err != nil {
			return err
		}
		return st.waitPaused(s, true, "paused")
	case kindManualPause:
		if err := createPause(st.w.dev, pause(st.ns, s.Name+"-manual", s.Name, "Manual")); err != nil {
			return err
		}
		return st.waitPaused(s, true, "paused")
	case kindResumed:
		if _, err := s.FinishPromotion(ctx, "Errored"); err != nil {
			return err
		}
		if err := st.waitPaused(s, true, "paused"); err != nil {
			return err
		}
		r, err := readRecord(s)
		if err != nil {
			return err
		}
		if r.Failure == nil {
			return fmt.Errorf("paused with no failure in its record (phase %s)", r.Phase)
		}
		if err := deletePause(st.w.lead, st.ns, r.Failure.Pause); err != nil {
			return err
		}
		return st.waitPaused(s, false, "resumed")
	}
	return nil
}

// pauseProjectWide latches the Stages of wideNS, pauses the project, waits
// until every Stage is paused, resumes it and waits until none is.
func (st *scenarioStories) pauseProjectWide(wideNS string, stages []*driver.Stage) error {
	for _, s := range stages {
		if _, err := s.FinishPromotion(ctx, "Succeeded"); err != nil {
			return err
		}
		if err := s.SetHealth(ctx, kargo.HealthHealthy); err != nil {
			return err
		}
	}
	if err := createPause(st.w.dev, pause(wideNS, "big-red-button", "*", "ProjectPause")); err != nil {
		return err
	}
	for _, s := range stages {
		if err := st.waitPaused(s, true, "paused project-wide"); err != nil {
			return err
		}
	}
	if err := deletePause(st.w.lead, wideNS, "big-red-button"); err != nil {
		return err
	}
	for _, s := range stages {
		if err := st.waitPaused(s, false, "resumed project-wide"); err != nil {
			return err
		}
	}
	return nil
}

func (st *scenarioStories) waitPaused(s *driver.Stage, want bool, what string) error {
	return st.slow.wait(s.Name+" "+what, func() (bool, error) {
		p, err := isPaused(s)
		return p == want, err
	})
}
