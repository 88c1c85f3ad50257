package e2e

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// TestVerifyOnLatchUnderFlapping is the seed's first case: a Stage with a
// configured web-metric analysis whose two Apps flap out of phase, so that
// Kargo never sees it Healthy and never starts the analysis. kargo-latch
// latches, starts exactly one AnalysisRun in Kargo's shape, the real Argo
// Rollouts controller runs it to Successful, and the Freight is marked
// verified at the run's finish, so that the next Stage (uat, which
// requests its Freight from test) is offered it, by Kargo's availability
// rule as the facts document gives it (played by the driver).
// A later Healthy pass of Kargo adopts that run instead of starting one.
func TestVerifyOnLatchUnderFlapping(t *testing.T) {
	t.Parallel()
	env.rollouts(t)
	ns := env.newProject(t)
	metric := metricServer(t)
	op := startVerifier(t, ns, verifySettings())
	s := env.createStage(t, ns, "test", verifyOnLatch, appsAB, webCheck(t, ns, metric, 1, ""))
	// uat requests its Freight from test, as the next Stage does.
	env.createStage(t, ns, "uat", nil, driver.WithUpstream(s.Name))

	freight := promote(t, s)
	flapUntilLatched(t, s)
	if ok, why, err := env.kargo.AvailableTo(ctx, ns, "uat", freight); err != nil || ok || why != "not verified in "+s.Name {
		t.Fatalf("uat before any analysis ended: offered %v (%s, %v); want not offered, for want of a verification in %s", ok, why, err, s.Name)
	}
	r := waitAnalysis(t, s, "the analysis to succeed", func(a *latch.Analysis) bool { return a.Phase == latch.VerificationSuccessful })
	run := assertOneOwnRun(t, s, freight)
	if a := r.Analysis; a.Actor != latch.Actor || a.Run != run.GetName() || a.Attempt != 1 || a.FinishTime == nil {
		t.Errorf("record's analysis = %+v, want kargo-latch's run %s, attempt 1, finished", a, run.GetName())
	}
	if metric.Requests() == 0 {
		t.Error("the metric endpoint was never asked: no analysis ran")
	}
	// The Freight is verified at the run's finish, as Kargo writes it.
	if at, want := waitVerified(t, s, freight), completedAt(t, ns, run.GetName()); at != want {
		t.Errorf("verifiedAt = %s, want the run's completedAt %s", at, want)
	}
	// Kargo's availability rule now offers it to the next Stage.
	if ok, why, err := env.kargo.AvailableTo(ctx, ns, "uat", freight); err != nil || !ok {
		t.Errorf("uat is not offered the verified Freight: %s (%v)", why, err)
	}
	// The latch's verdict and the analysis's are apart.
	if v := r.Verification; v == nil || strings.Contains(strings.ToLower(v.Message), "analysis") {
		t.Errorf("the latch's verification record = %+v, want a health verdict that names no analysis", v)
	}
	for _, reason := range []string{api.ReasonHealthLatched, api.ReasonVerificationStarted, api.ReasonVerificationSucceeded, api.ReasonFreightVerified} {
		waitEvent(t, s, reason)
	}
	if n := op.metric("kargo_latch_verification_runs_started_total", "stage", s.Name); n != 1 {
		t.Errorf("runs started = %v, want 1", n)
	}
	if n := op.metric("kargo_latch_verification_results_total", "stage", s.Name, "phase", "Successful"); n != 1 {
		t.Errorf("successful results = %v, want 1", n)
	}

	// Kargo's next Healthy pass looks the collection's runs up by its two
	// labels and adopts kargo-latch's run: still one run.
	must(t, s.SetAppsHealth(ctx, kargo.HealthHealthy, app("a", "Healthy"), app("b", "Healthy")))
	name, adopted, err := s.KargoAdoptOrStartVerification(ctx)
	must(t, err)
	if !adopted || name != run.GetName() {
		t.Errorf("Kargo's pass: run %s, adopted %v; want it to adopt %s", name, adopted, run.GetName())
	}
	waitAnalysis(t, s, "Kargo's adoption to be seen", func(a *latch.Analysis) bool { return a.AdoptedByKargo })
	if n := len(runsOf(t, s)); n != 1 {
		t.Errorf("%d runs after Kargo's pass, want 1", n)
	}
}

// TestVerifyOnLatchFailedAnalysisPauses: the same flapping Stage whose
// metric fails: the cycle fails with VerificationFailed, the Stage is
// paused, and nothing is marked verified.
func TestVerifyOnLatchFailedAnalysisPauses(t *testing.T) {
	t.Parallel()
	env.rollouts(t)
	ns := env.newProject(t)
	metric := metricServer(t)
	metric.SetFailing(true)
	op := startVerifier(t, ns, verifySettings())
	s := env.createStage(t, ns, "test", verifyOnLatch, appsAB, webCheck(t, ns, metric, 1, ""))

	freight := promote(t, s)
	flapUntilLatched(t, s)
	var r latch.Record
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("record: %s", stageRecord(t, s).Encode())
			for _, run := range runsOf(t, s) {
				t.Logf("run %s: %v", run.GetName(), run.Object["status"])
			}
		}
	})
	waitLong(t, "the cycle of "+s.Name+" to fail", time.Minute, func() bool {
		r = stageRecord(t, s)
		return r.Phase == latch.PhaseFailed
	})
	if r.Failure.Reason != latch.ReasonVerificationFailed || r.Failure.Pause == "" {
		t.Fatalf("failure = %+v, want VerificationFailed with a pause", r.Failure)
	}
	if r.Analysis == nil || r.Analysis.Phase != latch.VerificationFailed {
		t.Errorf("analysis = %+v, want Failed", r.Analysis)
	}
	assertOneOwnRun(t, s, freight)
	waitFor(t, "the pause to cover "+s.Name, func() bool {
		return len(stageRecord(t, s).Pauses) == 1 && stageRecord(t, s).Pauses[0] == r.Failure.Pause
	})
	ev := waitEvent(t, s, api.ReasonVerificationFailed)
	if ev.Type != "Warning" {
		t.Errorf("VerificationFailed Event is %s, want Warning", ev.Type)
	}
	assertNotVerified(t, op, s, freight, "after a failed analysis")
	if n := op.metric("kargo_latch_verification_results_total", "stage", s.Name, "phase", "Failed"); n != 1 {
		t.Errorf("failed results = %v, want 1", n)
	}
}

// TestVerifyOnLatchFollowsKargo: Kargo saw the Stage Healthy and started
// its own verification within the grace: kargo-latch follows it and starts
// none.
func TestVerifyOnLatchFollowsKargo(t *testing.T) {
	t.Parallel()
	env.rollouts(t)
	ns := env.newProject(t)
	metric := metricServer(t)
	settings := verifySettings()
	settings.VerifyGrace = time.Hour // long enough that only Kargo can start
	op := startVerifier(t, ns, settings)
	s := env.createStage(t, ns, "test", verifyOnLatch, appsAB, webCheck(t, ns, metric, 1, ""))

	promote(t, s)
	must(t, s.SetAppsHealth(ctx, kargo.HealthHealthy, app("a", "Healthy"), app("b", "Healthy")))
	waitPhase(t, s, latch.PhaseLatched)
	kargoRun, adopted, err := s.KargoAdoptOrStartVerification(ctx)
	must(t, err)
	if adopted {
		t.Fatalf("Kargo adopted %s: kargo-latch started a run within the grace", kargoRun)
	}
	// The operator has seen Kargo's verification...
	waitAnalysis(t, s, "Kargo's verification to be followed", func(a *latch.Analysis) bool {
		return a.Actor == latch.KargoActor && a.Run == kargoRun
	})
	// ...follows it to its end, and made no run of its own.
	if phase := followVerification(t, s); phase != "Successful" {
		t.Fatalf("Kargo's verification ended %s", phase)
	}
	waitAnalysis(t, s, "Kargo's result to be mirrored", func(a *latch.Analysis) bool { return a.Phase == latch.VerificationSuccessful })
	runs := runsOf(t, s)
	if len(runs) != 1 || runs[0].GetName() != kargoRun {
		t.Errorf("runs = %d (first %v), want only Kargo's %s", len(runs), runs, kargoRun)
	}
	if n := op.metric("kargo_latch_verification_runs_started_total"); n != 0 {
		t.Errorf("runs started = %v, want 0", n)
	}
}

// TestVerifyOnLatchSupersededRunIsTerminated: a newer promotion while
// kargo-latch's run is running: the run is terminated (spec.terminate, as
// Kargo aborts), and a new run verifies the new Freight once it latches.
func TestVerifyOnLatchSupersededRunIsTerminated(t *testing.T) {
	t.Parallel()
	sup := supersedeARun(t)
	s, second, old := sup.s, sup.second, sup.old
	flapUntilLatched(t, s)
	r := waitAnalysis(t, s, "a run for the new Freight", func(a *latch.Analysis) bool { return a.Run != "" && a.Run != old })
	run := assertOneOwnRun(t, s, second)
	if r.Analysis.Run != run.GetName() {
		t.Errorf("record names %s, the collection's run is %s", r.Analysis.Run, run.GetName())
	}
	waitEvent(t, s, api.ReasonVerificationTerminated)
}

// supersession is a verify-on-latch Stage whose first cycle's run (30
// measurements, 2 s apart) a second promotion superseded, and which
// kargo-latch has terminated (after cutting it short).
type supersession struct {
	ns               string
	s                *driver.Stage
	first, second    string // the Freight of each promotion
	firstCollection  string
	old              string // the first cycle's run
	oldRunTerminated *unstructured.Unstructured
}

func supersedeARun(t *testing.T) supersession {
	t.Helper()
	env.rollouts(t)
	sup := supersession{ns: env.newProject(t)}
	metric := metricServer(t)
	startVerifier(t, sup.ns, verifySettings())
	sup.s = env.createStage(t, sup.ns, "test", verifyOnLatch, appsAB, webCheck(t, sup.ns, metric, 30, "2s"))

	sup.first = promote(t, sup.s)
	flapUntilLatched(t, sup.s)
	sup.firstCollection = collectionOf(t, sup.s)
	sup.old = waitAnalysis(t, sup.s, "the first run to start", func(a *latch.Analysis) bool { return a.Run != "" }).Analysis.Run
	assertOneOwnRun(t, sup.s, sup.first)

	sup.second = promote(t, sup.s)
	waitFor(t, "run "+sup.old+" to be told to terminate", func() bool {
		run, err := env.kargo.AnalysisRun(ctx, sup.ns, sup.old)
		must(t, err)
		sup.oldRunTerminated = run
		terminate, _, _ := unstructured.NestedBool(run.Object, "spec", "terminate")
		return terminate
	})
	return sup
}

// TestVerifyOnLatchUnsupportedArgument: an argument kargo-latch cannot
// evaluate exactly as Kargo would (a ConfigMap read) gives a Warning
// VerificationUnsupported, a metric, and no run, never a pause.
func TestVerifyOnLatchUnsupportedArgument(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	metric := metricServer(t)
	op := startVerifier(t, ns, verifySettings())
	path := "healthz"
	_, err := env.kargo.CreateAnalysisTemplate(ctx, ns, "web-check", driver.AnalysisTemplate{
		Metrics: []driver.Metric{driver.WebMetric("web", metric.URL+"/{{args.path}}")},
		Args:    []driver.TemplateArg{{Name: "path", Value: &path}},
	})
	must(t, err)
	s := env.createStage(t, ns, "test", verifyOnLatch, appsAB, driver.WithAnalysis(driver.Verification{
		Templates: []driver.TemplateRef{{Name: "web-check"}},
		Args:      []driver.Arg{{Name: "path", Value: "${{ configMap('settings').path }}"}},
	}))

	promote(t, s)
	flapUntilLatched(t, s)
	ev := waitEvent(t, s, api.ReasonVerificationUnsupported)
	if ev.Type != "Warning" || !strings.Contains(ev.Message, "configMap") {
		t.Errorf("Event = %s %q, want a Warning naming configMap", ev.Type, ev.Message)
	}
	if n := op.metric("kargo_latch_verification_problems_total", "stage", s.Name, "reason", api.ReasonVerificationUnsupported); n != 1 {
		t.Errorf("problems = %v, want 1", n)
	}
	if runs := runsOf(t, s); len(runs) != 0 {
		t.Errorf("%d runs, want none", len(runs))
	}
	r := stageRecord(t, s)
	if r.Phase != latch.PhaseLatched || r.Analysis != nil || len(r.Pauses) != 0 {
		t.Errorf("record = phase %s, analysis %+v, pauses %v; want Latched, no analysis, no pause", r.Phase, r.Analysis, r.Pauses)
	}
}

// TestVerifyOnLatchDeletedRunStartsAgainOnce: a run someone deletes before
// its result is started again once, under the next attempt's name.
func TestVerifyOnLatchDeletedRunStartsAgainOnce(t *testing.T) {
	t.Parallel()
	env.rollouts(t)
	ns := env.newProject(t)
	metric := metricServer(t)
	startVerifier(t, ns, verifySettings())
	s := env.createStage(t, ns, "test", verifyOnLatch, appsAB, webCheck(t, ns, metric, 30, "2s"))

	promote(t, s)
	flapUntilLatched(t, s)
	first := waitAnalysis(t, s, "the run to start", func(a *latch.Analysis) bool { return a.Run != "" }).Analysis.Run
	deleteRun(t, ns, first)
	r := waitAnalysis(t, s, "the run to be started again", func(a *latch.Analysis) bool { return a.Attempt == 2 })
	if r.Analysis.Run == first {
		t.Errorf("the second attempt reuses the name %s", first)
	}
	waitEvent(t, s, api.ReasonVerificationRunDeleted)
	if n := len(runsOf(t, s)); n != 1 {
		t.Errorf("%d runs, want the second attempt's only", n)
	}
}

// TestVerifyOnLatchExactlyOnceAcrossKills: the operator is killed with
// SIGKILL as soon as its run exists (before or after the record names it)
// and again while the run runs: still exactly one run for the collection,
// one result, one mark.
func TestVerifyOnLatchExactlyOnceAcrossKills(t *testing.T) {
	t.Parallel()
	env.rollouts(t)
	// The run lasts about 10 s, so that the restarted operator names it
	// while it runs, however slowly a loaded machine starts it.
	op, s, freight := latchedUnderAKillableVerifier(t, "1s", 6, "2s")
	waitFor(t, "the run to be made", func() bool { return len(runsOf(t, s)) > 0 })
	op.kill()
	must(t, op.launch())
	r := waitAnalysis(t, s, "the record to name the run", func(a *latch.Analysis) bool { return a.Run != "" })
	// Killed while the run runs. A result stored in the same write as the
	// run's name is not this scenario: its Event, sent after the write,
	// is as lost to a kill as any Event.
	if r.Analysis.Terminal() {
		t.Logf("the run had ended (%s) when the restarted operator named it: no second kill", r.Analysis.Phase)
	} else {
		op.kill()
		must(t, op.launch())
	}
	assertVerifiedOnce(t, s, freight)
}

// latchedUnderAKillableVerifier starts a verify-on-latch operator process
// (with the grace given) that a test can kill, and a flapping Stage with a
// web-metric analysis (count measurements, every interval) that it
// latches.
func latchedUnderAKillableVerifier(t *testing.T, grace string, count int, interval string) (*process, *driver.Stage, string) {
	t.Helper()
	ns := env.newProject(t)
	metric := metricServer(t)
	op := newProcessAs(t, env.verifier, "--namespace", ns, "--enable-verify-on-latch", "--verify-grace", grace,
		"--latch-deadline", "1m", "--health-probe-bind-address", "0", "--metrics-bind-address", "0", "-v", "2")
	op.start()
	s := env.createStage(t, ns, "test", verifyOnLatch, appsAB, webCheck(t, ns, metric, count, interval))
	freight := promote(t, s)
	flapUntilLatched(t, s)
	return op, s, freight
}

// assertVerifiedOnce waits for the cycle's analysis to succeed, and checks
// that it took exactly one run, attempt 1, one result and one mark, at the
// run's finish.
func assertVerifiedOnce(t *testing.T, s *driver.Stage, freight string) {
	t.Helper()
	r := waitAnalysis(t, s, "the analysis to succeed", func(a *latch.Analysis) bool { return a.Phase == latch.VerificationSuccessful })
	run := assertOneOwnRun(t, s, freight)
	if r.Analysis.Run != run.GetName() || r.Analysis.Attempt != 1 {
		t.Errorf("record's analysis = %+v, want attempt 1 of %s", r.Analysis, run.GetName())
	}
	if at, want := waitVerified(t, s, freight), completedAt(t, s.Namespace, run.GetName()); at != want {
		t.Errorf("verifiedAt = %s, want the run's completedAt %s", at, want)
	}
	waitEvent(t, s, api.ReasonFreightVerified)
	for _, reason := range []string{api.ReasonVerificationSucceeded, api.ReasonFreightVerified} {
		if n := env.eventCount(t, s, reason); n != 1 {
			t.Errorf("%d %s Events, want 1", n, reason)
		}
	}
}

// TestVerifyOnLatchRunMadeButNotRecordedIsAdopted forces the window a kill
// may hit by luck in the test above: the run is made, the record that names
// it cannot be stored (the API server refuses the operator's Stage writes),
// and the operator is killed then. Restarted, it finds the run by the
// cycle's name and follows it: still one run, attempt 1, one result.
func TestVerifyOnLatchRunMadeButNotRecordedIsAdopted(t *testing.T) {
	t.Parallel()
	env.rollouts(t)
	// The grace leaves time to put the denial in force after the latch.
	op, s, freight := latchedUnderAKillableVerifier(t, "15s", 1, "")
	lift := denyStageWrites(t, s.Namespace, s, env.verifier, "system:serviceaccount:kargo-latch:"+verifierServiceAccount)
	if len(runsOf(t, s)) != 0 {
		t.Fatal("the run was made before the denial was in force: the grace is too short for this test")
	}
	logged := op.logSize()
	waitFor(t, "the run to be made", func() bool { return len(runsOf(t, s)) > 0 })
	waitFor(t, "the operator to fail to store the record that names the run", func() bool {
		return strings.Contains(op.logText(logged), "may not write Stages now")
	})
	if a := stageRecord(t, s).Analysis; a != nil && a.Run != "" {
		t.Fatalf("the record names run %s: the window was not forced", a.Run)
	}
	op.kill()
	lift()
	must(t, op.launch())
	assertVerifiedOnce(t, s, freight)
}
