package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/controller"
	"github.com/kargo-latch/kargo-latch/controller/verification"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// TestVerifyOnLatchCutShortRunNeverPasses is the case issue 29 reproduced
// with the real controllers: kargo-latch's run has measured once (ok), the
// metric then turns to failing and an App degrades past the grace. The
// cycle fails and the Stage is paused; kargo-latch ends its run, which Argo
// Rollouts (the real analysis controller here) ends Successful, as it ends
// every terminated run without a failed measurement. When the Apps recover,
// Kargo's lookup (the driver's, as Kargo's) must not find that run: a
// fresh run decides, fails, and the Freight is never verified in the Stage.
func TestVerifyOnLatchCutShortRunNeverPasses(t *testing.T) {
	t.Parallel()
	w := latchedWithALongRun(t)
	ns, metric, op, s, freight, ours := w.ns, w.metric, w.op, w.s, w.freight, w.run
	collection := collectionOf(t, s)
	waitFor(t, "the run's first measurement", func() bool { return metric.Requests() >= 1 })
	metric.SetFailing(true)
	must(t, s.SetAppsHealth(ctx, kargo.HealthUnhealthy, app("a", "Degraded"), app("b", "Healthy")))
	r := waitPhase(t, s, latch.PhaseFailed)
	if r.Failure.Reason != latch.ReasonDegraded || r.Failure.Pause == "" {
		t.Fatalf("failure = %+v, want Degraded with a pause", r.Failure)
	}

	// The run leaves Kargo's lookup, and is then terminated; Argo Rollouts
	// ends it Successful, with no failed measurement.
	var run *unstructured.Unstructured
	waitFor(t, "run "+ours+" to be terminated, then ended by Argo Rollouts", func() bool {
		var err error
		run, err = env.kargo.AnalysisRun(ctx, ns, ours)
		must(t, err)
		terminate, _, _ := unstructured.NestedBool(run.Object, "spec", "terminate")
		return terminate && driver.AnalysisRunPhase(run) == "Successful"
	})
	if n := metric.Requests(); n != 1 {
		t.Logf("the run measured %d times (the metric failed from the second): the quirk needs one passing measurement", n)
	}
	assertCutShort(t, run, s.Name, collection, "Degraded")
	a := waitAnalysis(t, s, "the analysis to be recorded cut short", func(a *latch.Analysis) bool {
		return a.Phase == latch.VerificationAborted
	}).Analysis
	if !strings.HasPrefix(a.Message, "cut short by kargo-latch") {
		t.Errorf("analysis message = %q", a.Message)
	}

	// The Apps recover: Kargo's Healthy pass finds no run of the
	// collection, and starts its own, which the failing metric fails.
	must(t, s.SetAppsHealth(ctx, kargo.HealthHealthy, app("a", "Healthy"), app("b", "Healthy")))
	kargoRun, adopted, err := s.KargoAdoptOrStartVerification(ctx)
	must(t, err)
	if adopted || kargoRun == ours {
		t.Fatalf("Kargo's lookup adopted %s (adopted=%v): a run kargo-latch cut short passed for the verification", kargoRun, adopted)
	}
	if phase := followVerification(t, s); phase != "Failed" {
		t.Errorf("the fresh run ended %s, want Failed (the metric fails)", phase)
	}
	assertNotVerified(t, op, s, freight, "after the cut-short run ended Successful")
	waitEvent(t, s, api.ReasonVerificationCutShort)
}

// TestVerifyOnLatchRepromotedCollectionGetsAFreshRun: a run kargo-latch cut
// short because a newer promotion superseded it stays out of Kargo's lookup
// when the same Freight collection is promoted again (a rollback): Kargo's
// next lookup of the collection never adopts it.
func TestVerifyOnLatchRepromotedCollectionGetsAFreshRun(t *testing.T) {
	t.Parallel()
	sup := supersedeARun(t)
	ns, s, first, collection, old, run := sup.ns, sup.s, sup.first, sup.firstCollection, sup.old, sup.oldRunTerminated
	assertCutShort(t, run, s.Name, collection, "superseded")

	// Roll back to the first Freight: the same collection again.
	_, err := s.StartPromotionOf(ctx, first, "admin")
	must(t, err)
	_, err = s.FinishPromotion(ctx, "Succeeded")
	must(t, err)
	if got := collectionOf(t, s); got != collection {
		t.Fatalf("the rollback's collection is %s, want %s again", got, collection)
	}
	waitFor(t, "Argo Rollouts to end run "+old, func() bool {
		run, err = env.kargo.AnalysisRun(ctx, ns, old)
		must(t, err)
		return driver.AnalysisRunPhase(run) == "Successful"
	})
	must(t, s.SetAppsHealth(ctx, kargo.HealthHealthy, app("a", "Healthy"), app("b", "Healthy")))
	waitFor(t, "the rollback's cycle on "+s.Name, func() bool {
		r := stageRecord(t, s)
		return r.Freight == first && r.Phase == latch.PhaseLatched
	})
	kargoRun, adopted, err := s.KargoAdoptOrStartVerification(context.Background())
	must(t, err)
	if kargoRun == old {
		t.Fatalf("Kargo's lookup adopted %s (adopted=%v), which kargo-latch cut short", old, adopted)
	}
}

// TestVerifyOnLatchLeavesAReverifiedStageToKargo: a Stage carrying Kargo's
// reverify token (Kargo never removes it) makes Kargo skip its lookup and
// start a run of its own on its next Healthy pass; kargo-latch starts none,
// says so, and starts its run once the token is removed.
func TestVerifyOnLatchLeavesAReverifiedStageToKargo(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	metric := metricServer(t)
	op := startVerifier(t, ns, verifySettings())
	annotations := map[string]string{kargo.ReverifyAnnotation: "an-earlier-verification"}
	for k, v := range verifyOnLatch {
		annotations[k] = v
	}
	s := env.createStage(t, ns, "test", annotations, appsAB, webCheck(t, ns, metric, 1, ""))

	promote(t, s)
	flapUntilLatched(t, s)
	ev := waitEvent(t, s, api.ReasonVerificationLeftToKargo)
	if ev.Type != "Warning" || !strings.Contains(ev.Message, kargo.ReverifyAnnotation) {
		t.Errorf("Event %s: %s", ev.Type, ev.Message)
	}
	if n := op.metric("kargo_latch_verification_runs_started_total"); n != 0 {
		t.Errorf("runs started = %v, want 0", n)
	}
	if runs := runsOf(t, s); len(runs) != 0 {
		t.Errorf("%d runs, want none", len(runs))
	}
	_, err := env.dyn.Resource(kargo.StagesResource).Namespace(ns).Patch(ctx, s.Name, types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+kargo.ReverifyAnnotation+`":null}}}`), metav1.PatchOptions{})
	must(t, err)
	waitAnalysis(t, s, "kargo-latch's run once the token is gone", func(a *latch.Analysis) bool { return a.ByKargoLatch() && a.Run != "" })
}

// assertCutShort checks that a run is out of Kargo's lookup and keeps, under
// kargo-latch's keys, its Stage, its collection and why it was cut short.
func assertCutShort(t *testing.T, run *unstructured.Unstructured, stage, collection, why string) {
	t.Helper()
	l, a := run.GetLabels(), run.GetAnnotations()
	if _, ok := l[verification.StageLabel]; ok {
		t.Errorf("run %s still has Kargo's %s label: %v", run.GetName(), verification.StageLabel, l)
	}
	if _, ok := l[verification.FreightCollectionLabel]; ok {
		t.Errorf("run %s still has Kargo's %s label: %v", run.GetName(), verification.FreightCollectionLabel, l)
	}
	if l[verification.CutShortStageLabel] != stage || l[verification.CutShortCollectionLabel] != collection || l[verification.MarkerLabel] != verification.MarkerValue {
		t.Errorf("run %s labels = %v, want the Stage and collection under kargo-latch's keys", run.GetName(), l)
	}
	if !strings.Contains(a[verification.CutShortAnnotation], why) || a[verification.CutShortAtAnnotation] == "" {
		t.Errorf("run %s annotations = %v, want why (%q) and when", run.GetName(), a, why)
	}
}

// TestVerifyOnLatchAdoptedRunIsAbortedThroughKargo: Kargo adopted
// kargo-latch's run (a Healthy pass found it by its labels); the cycle then
// fails. kargo-latch never patches the run, Kargo's: it writes Kargo's own
// abort token on the Stage, Kargo (the driver, as Kargo) aborts and records
// Failed itself, and the run's Successful end is never read as a pass.
func TestVerifyOnLatchAdoptedRunIsAbortedThroughKargo(t *testing.T) {
	t.Parallel()
	w := latchedWithALongRun(t)
	ns, op, s, freight, ours := w.ns, w.op, w.s, w.freight, w.run
	must(t, s.SetAppsHealth(ctx, kargo.HealthHealthy, app("a", "Healthy"), app("b", "Healthy")))
	run, adopted, err := s.KargoAdoptOrStartVerification(ctx)
	must(t, err)
	if !adopted || run != ours {
		t.Fatalf("Kargo's pass took %s (adopted=%v), want kargo-latch's %s adopted", run, adopted, ours)
	}
	waitAnalysis(t, s, "the adoption to be seen", func(a *latch.Analysis) bool { return a.AdoptedByKargo })

	must(t, s.SetAppsHealth(ctx, kargo.HealthUnhealthy, app("a", "Degraded"), app("b", "Healthy")))
	waitPhase(t, s, latch.PhaseFailed)
	u, err := s.Get(ctx)
	must(t, err)
	vid := kargoVerificationID(t, u)
	waitFor(t, "Kargo's abort token on "+s.Name, func() bool {
		u, err := s.Get(ctx)
		must(t, err)
		return kargo.RequestTokenID(u.GetAnnotations()[kargo.AbortAnnotation]) == vid
	})
	waitEvent(t, s, api.ReasonVerificationAbortRequested)
	before, err := env.kargo.AnalysisRun(ctx, ns, ours)
	must(t, err)
	if l := before.GetLabels(); l[verification.StageLabel] == "" || before.GetAnnotations()[verification.CutShortAnnotation] != "" {
		t.Errorf("kargo-latch changed the run Kargo adopted: labels %v, annotations %v", l, before.GetAnnotations())
	}
	if terminate, _, _ := unstructured.NestedBool(before.Object, "spec", "terminate"); terminate {
		t.Error("kargo-latch terminated the run Kargo adopted")
	}

	aborted, err := s.KargoAbortIfRequested(ctx)
	must(t, err)
	if !aborted {
		t.Fatal("Kargo's pass found no abort to act on")
	}
	a := waitAnalysis(t, s, "the abort in Kargo to be recorded", func(a *latch.Analysis) bool { return a.Phase == latch.VerificationAborted }).Analysis
	if !strings.HasPrefix(a.Message, "aborted in Kargo") {
		t.Errorf("analysis message = %q", a.Message)
	}
	waitFor(t, "Argo Rollouts to end the run Kargo terminated", func() bool {
		r, err := env.kargo.AnalysisRun(ctx, ns, ours)
		must(t, err)
		return driver.AnalysisRunPhase(r) == "Successful"
	})
	must(t, s.SetAppsHealth(ctx, kargo.HealthHealthy, app("a", "Healthy"), app("b", "Healthy")))
	if phase, err := s.KargoFollowVerification(ctx); err != nil || phase != "Failed" {
		t.Errorf("Kargo's verification = %s (%v), want Failed", phase, err)
	}
	assertNotVerified(t, op, s, freight, "after Kargo aborted the adopted run")
}

// TestVerifyOnLatchNotPickedUpNamesTheInstanceID: kargo-latch labels its
// runs for another analysis controller instance than Kargo's own runs in
// the project carry; no controller picks the run up, and the Warning names
// the mismatch.
func TestVerifyOnLatchNotPickedUpNamesTheInstanceID(t *testing.T) {
	t.Parallel()
	env.rollouts(t)
	ns := env.newProject(t)
	metric := metricServer(t)
	settings := verifySettings()
	settings.VerifyPickupTimeout = 3 * time.Second
	startOperatorWith(t, env.verifier, ns, settings, nil, func(c *controller.Config) {
		c.VerifyOnLatch, c.RolloutsInstanceID = true, "not-kargos-instance"
	})
	// Kargo's own run in the project, unlabelled as the tests' Kargo has
	// no ROLLOUTS_CONTROLLER_INSTANCE_ID.
	other := env.createStage(t, ns, "other", nil, appsAB, webCheck(t, ns, metric, 1, ""))
	promote(t, other)
	must(t, other.SetAppsHealth(ctx, kargo.HealthHealthy, app("a", "Healthy"), app("b", "Healthy")))
	_, _, err := other.KargoAdoptOrStartVerification(ctx)
	must(t, err)

	s := env.createStage(t, ns, "test", verifyOnLatch, appsAB, driver.WithAnalysis(driver.Verification{Templates: []driver.TemplateRef{{Name: "web-check"}}}))
	promote(t, s)
	flapUntilLatched(t, s)
	ev := waitEvent(t, s, api.ReasonVerificationNotPickedUp)
	for _, want := range []string{"mismatch", "controller-instance-id=not-kargos-instance", "with no controller-instance-id label", "--rollouts-controller-instance-id"} {
		if !strings.Contains(ev.Message, want) {
			t.Errorf("VerificationNotPickedUp says %q, want it to name %q", ev.Message, want)
		}
	}
}

// kargoVerificationID is the id of freightHistory[0]'s newest verification.
func kargoVerificationID(t *testing.T, u *unstructured.Unstructured) string {
	t.Helper()
	history, _, _ := unstructured.NestedSlice(u.Object, "status", "freightHistory")
	if len(history) == 0 {
		t.Fatal("no freightHistory")
	}
	vh, _ := history[0].(map[string]any)["verificationHistory"].([]any)
	if len(vh) == 0 {
		t.Fatal("no verification in freightHistory[0]")
	}
	id, _ := vh[0].(map[string]any)["id"].(string)
	return id
}

// TestVerifyOnLatchPlantedCutShortAnnotationIsNoEnd: a Stage's
// analysisRunMetadata puts kargo-latch's cut-short annotations on the run
// (anyone may): the run is still in Kargo's lookup, so it is not taken as
// cut short; its failing metric fails the cycle, as it would any run.
func TestVerifyOnLatchPlantedCutShortAnnotationIsNoEnd(t *testing.T) {
	t.Parallel()
	env.rollouts(t)
	ns := env.newProject(t)
	metric := metricServer(t)
	metric.SetFailing(true)
	startVerifier(t, ns, verifySettings())
	webCheck(t, ns, metric, 1, "")
	s := env.createStage(t, ns, "test", verifyOnLatch, appsAB, driver.WithAnalysis(driver.Verification{
		Templates: []driver.TemplateRef{{Name: "web-check"}},
		RunAnnotations: map[string]string{
			verification.CutShortAnnotation:   "planted by analysisRunMetadata",
			verification.CutShortAtAnnotation: "2026-01-01T00:00:00Z",
		},
	}))
	promote(t, s)
	flapUntilLatched(t, s)
	r := waitPhase(t, s, latch.PhaseFailed)
	if r.Failure.Reason != latch.ReasonVerificationFailed || r.Analysis == nil || r.Analysis.Phase != latch.VerificationFailed {
		t.Errorf("failure %+v, analysis %+v: want the run's failure, not an end", r.Failure, r.Analysis)
	}
}

// longRunWorld is a latched verify-on-latch Stage whose run kargo-latch
// started: four web measurements, 40 s apart, so that it runs on while
// the test acts; a degraded grace of 2 s.
type longRunWorld struct {
	ns      string
	metric  *driver.MetricServer
	op      *operator
	s       *driver.Stage
	freight string
	run     string
}

func latchedWithALongRun(t *testing.T) longRunWorld {
	t.Helper()
	env.rollouts(t)
	w := longRunWorld{ns: env.newProject(t), metric: metricServer(t)}
	settings := verifySettings()
	settings.DegradedGrace = 2 * time.Second
	w.op = startVerifier(t, w.ns, settings)
	w.s = env.createStage(t, w.ns, "test", verifyOnLatch, appsAB, webCheck(t, w.ns, w.metric, 4, "40s"))
	w.freight = promote(t, w.s)
	flapUntilLatched(t, w.s)
	w.run = waitAnalysis(t, w.s, "kargo-latch's run to start", func(a *latch.Analysis) bool { return a.Run != "" }).Analysis.Run
	return w
}
