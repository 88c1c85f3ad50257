package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/controller/verification"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// The flapping of the first story: the pattern measured with Kargo's real
// controller (each App Healthy 3 s of every 7 s, never together), played
// 2.5 times faster so that it fits on a screen. It goes on until the
// Freight is marked verified, and a little after.
const (
	flapTick     = 400 * time.Millisecond
	flapPeriod   = 7  // ticks
	flapAfter    = 2  // ticks played after the mark
	flapMaxTicks = 75 // 30 s: the latch comes in tick 4, the mark some 5 s later
)

// outOfPhaseApps are the Argo CD Applications of Stage test.
var outOfPhaseApps = []string{"test-a", "test-b"}

// The Stages of the first story: uat requests Freight from test.
const (
	upstream   = "test"
	downstream = "uat"
)

// The first story's analysis: an AnalysisTemplate with one web metric that
// asks the demo's endpoint webChecks times, a second apart.
const (
	webTemplate = "web-check"
	webChecks   = 3
)

// appHealthAt is the Argo CD health of App i in a tick: both roll out in
// tick 0, then test-a is Healthy in ticks 1-3 of every 7 and test-b in
// ticks 4-6. They are never Healthy together, so Kargo's Stage health,
// where the worst App wins, is Progressing throughout.
func appHealthAt(i, tick int) string {
	if p := tick % flapPeriod; p >= 1+3*i && p <= 3+3*i {
		return kargo.HealthHealthy
	}
	return kargo.HealthProgressing
}

// playOutOfPhaseApps is the first story, the problem kargo-latch exists for
// (akuity/kargo#2847): a Stage whose Apps autoscale out of phase is never
// Healthy as a whole, so Kargo never starts its configured analysis, never
// marks its Freight verified, and no downstream Stage receives it.
// kargo-latch latches per App, starts the analysis in Kargo's shape, Argo
// Rollouts' real analysis controller runs it, and on its success
// kargo-latch marks the Freight verified, so that it flows on.
func (d *demo) playOutOfPhaseApps(ctx context.Context, k *driver.Kargo) error {
	m := driver.WebMetric("web", d.metric.URL+"/healthz")
	m.Count, m.Interval = webChecks, "1s"
	if _, err := k.CreateAnalysisTemplate(ctx, project, webTemplate, driver.AnalysisTemplate{Metrics: []driver.Metric{m}}); err != nil {
		return err
	}
	say(`Created AnalysisTemplate %s: a web metric that asks %s/healthz %d times, 1s apart, for {"status":"ok"}`, webTemplate, d.metric.URL, webChecks)
	say("  (an endpoint this demo serves)")
	test, err := k.CreateStage(ctx, project, upstream, map[string]string{
		api.VerifyOnLatchAnnotation: "true",
		api.MarkVerifiedAnnotation:  "true",
	}, driver.WithApps(outOfPhaseApps...), driver.WithAnalysis(driver.Verification{Templates: []driver.TemplateRef{{Name: webTemplate}}}))
	if err != nil {
		return err
	}
	if err := d.createDownstream(ctx, k); err != nil {
		return err
	}
	say(`Created Stage test (spec.verification: %s; kargo-latch.io/verify-on-latch and mark-verified: "true")`, webTemplate)
	say("  and Stage uat, which requests Freight from test (sources.stages: [test])")
	if err := d.waitFor(ctx, "the operator to see the Stages", func() bool { return d.phase(ctx, test) == latch.PhaseIdle }); err != nil {
		return err
	}
	say("  %s leads; the other replica stands by with warm caches", d.leader().name)

	say("")
	say("1. Kargo promotes new Freight to test; its two Argo CD Apps autoscale out of phase")
	say("   (akuity/kargo#2847: Kargo starts a Stage's analysis only in a pass that sees the Stage Healthy)")
	if _, err := test.StartPromotion(ctx); err != nil {
		return err
	}
	if _, err := test.FinishPromotion(ctx, "Succeeded"); err != nil {
		return err
	}
	freight, err := test.CurrentFreight(ctx)
	if err != nil {
		return err
	}
	if err := d.waitFor(ctx, "Promoted", func() bool { return d.phase(ctx, test) == latch.PhasePromoted }); err != nil {
		return err
	}
	_, why, err := d.availableToDownstream(ctx, freight)
	if err != nil {
		return err
	}
	say("   Freight %s is in test; uat may not have it yet: %s", short(freight), why)
	say("   Each App is Healthy 3 of every 7 ticks of 0.4 s, never together (the pattern measured with Kargo, 2.5x faster):")

	t, err := d.flap(ctx, k, test)
	if err != nil {
		return err
	}
	say("   Kargo's Stage health was Progressing in %d of %d samples: on its own, Kargo would never have started", t.ticks, t.ticks)
	say("   the analysis, nor let %s out of test.", short(freight))
	say("   kargo-latch gave Kargo a grace of %s after the latch to start its own (in a Healthy pass it would);", verifyGrace)
	say("   Kargo did not, so kargo-latch started the run itself (the demo's grace is short; the default is 10s).")
	return d.showVerified(ctx, k, test, freight, t)
}

// showVerified is the end of the first story: the AnalysisRun, the record,
// the Freight verified at the run's finish, and uat's view of it.
func (d *demo) showVerified(ctx context.Context, k *driver.Kargo, test *driver.Stage, freight string, t timeline) error {
	rec := d.record(ctx, test)
	if rec.Analysis == nil || rec.Analysis.Run == "" {
		return errors.New("kargo-latch recorded no AnalysisRun")
	}
	run, err := k.AnalysisRun(ctx, project, rec.Analysis.Run)
	if err != nil {
		return err
	}
	completedAt, _, _ := unstructured.NestedString(run.Object, "status", "completedAt")
	startedAt, _, _ := unstructured.NestedString(run.Object, "status", "startedAt")
	say("")
	say("   The AnalysisRun (kubectl get analysisruns -n %s -l kargo.akuity.io/stage=test):", project)
	say("     name %s", run.GetName())
	say("       (Kargo's <stage>.<ULID>.<collection> shape, the ULID a hash of the cycle: one run per cycle)")
	labels := run.GetLabels()
	for _, l := range []string{driver.StageLabel, driver.FreightCollectionLabel, verification.MarkerLabel} {
		say("     label %s=%s", l, labels[l])
	}
	for _, o := range run.GetOwnerReferences() {
		say("     owner %s %s, annotation %s=%s", o.Kind, short(o.Name), driver.PromotionAnnotation, run.GetAnnotations()[driver.PromotionAnnotation])
	}
	say("     phase %s (written by Argo Rollouts: %s), startedAt %s, completedAt %s",
		driver.AnalysisRunPhase(run), strings.Join(t.runPhases, " -> "), startedAt, completedAt)
	results, _, _ := unstructured.NestedSlice(run.Object, "status", "metricResults")
	for _, r := range results {
		m, _ := r.(map[string]any)
		say("     metric %v: %v, %v of %v measurements successful", m["name"], m["phase"], m["successful"], m["count"])
	}
	say("     the demo's endpoint answered %d requests", d.metric.Requests())
	say("   Kargo looks up a collection's runs by those two labels before it starts one: in a later Healthy pass it")
	say("   would adopt this run, not start a second.")

	say("")
	say("   What kargo-latch recorded (annotation kargo-latch.io/state), the latch and the analysis apart:")
	say("     latch: phase %s, latchedBy %s, latchedAt %s, verdict: %q", rec.Phase, rec.LatchedBy, t.at(*rec.LatchedAt), rec.Verification.Message)
	for _, app := range slices.Sorted(maps.Keys(rec.AppsHealthy)) {
		say("       appsHealthy[%s]: %s", app, t.at(rec.AppsHealthy[app]))
	}
	a := rec.Analysis
	say("     analysis: actor %s, phase %s, finishTime %s", a.Actor, a.Phase, t.at(*a.FinishTime))
	say("     marked: %s", strings.Join(shortAll(rec.Marked), ", "))

	f, err := k.Freight(ctx, project, freight)
	if err != nil {
		return err
	}
	verifiedIn, _, _ := unstructured.NestedMap(f.Object, "status", "verifiedIn")
	verifiedAt, _, _ := unstructured.NestedString(verifiedIn, upstream, "verifiedAt")
	b, _ := json.Marshal(verifiedIn)
	say("   The Freight, read back from the API server (kubectl get freight -n %s %s -o jsonpath='{.status.verifiedIn}'):", project, freight)
	say("     %s", b)
	if verifiedAt != completedAt {
		return fmt.Errorf("verifiedAt %s is not the run's completedAt %s", verifiedAt, completedAt)
	}
	say("     verifiedAt is the run's completedAt, as Kargo writes it")
	if err := d.waitForEvents(ctx, upstream, api.ReasonHealthLatched, api.ReasonVerificationStarted, api.ReasonVerificationSucceeded, api.ReasonFreightVerified); err != nil {
		return err
	}
	d.showEvents(ctx, upstream)
	d.showMetrics("kargo_latch_verification_runs_started_total", "kargo_latch_verification_results_total", "kargo_latch_freight_verified_total")

	available, why, err := d.availableToDownstream(ctx, freight)
	if err != nil {
		return err
	}
	if !available {
		return fmt.Errorf("freight %s is still not available to uat: %s", freight, why)
	}
	say("   uat requests Freight from test, and Kargo offers a Stage the Freight verified in its upstream Stage")
	say("   (plus any soak time): %s, so uat would now receive %s. With Kargo's real controller,", why, short(freight))
	say("   the downstream Stage auto-promoted 3.2 s after such a write.")
	say("   After the latch the Apps' health changed %d more times. kargo-latch keeps per-App health only while a cycle", t.flapsAfterLatch)
	say("   waits for its latch, so the latch held. It synced the Stage %d times since, and the record is the one", t.syncsAfterLatch)
	say("   stored at the latch but for the analysis and the mark: %t; FreightVerified Events: %d",
		onlyAnalysisAndMark(t.latched, rec), d.countEvents(ctx, upstream, api.ReasonFreightVerified))
	d.showStatus()
	return nil
}

// onlyAnalysisAndMark tells whether a record is the one stored at the
// latch but for the cycle's analysis and its marked Freight.
func onlyAnalysisAndMark(at, now latch.Record) bool {
	at.Analysis, now.Analysis = nil, nil
	at.Marked, now.Marked = nil, nil
	return cmp.Equal(at, now)
}

// timeline is what flap saw, for the lines that follow it.
type timeline struct {
	start           time.Time
	ticks           int
	latched         latch.Record // the record as stored at the latch
	runPhases       []string     // the run's phases as the ticks saw them
	flapsAfterLatch int          // changes of the Apps' health after the latch
	syncsAfterLatch int
}

// at shows a moment of the timeline as a clock time and its offset.
func (t timeline) at(when time.Time) string {
	return fmt.Sprintf("%s (t+%.1fs)", when.Local().Format("15:04:05.000"), when.Sub(t.start).Seconds())
}

// flap plays the out-of-phase Apps tick by tick and prints a line per tick:
// each App's health, Kargo's Stage health, and what kargo-latch made of it,
// until the Freight is marked verified and flapAfter ticks more. It shows
// kargo-latch's status table once, while the analysis runs.
func (d *demo) flap(ctx context.Context, k *driver.Kargo, test *driver.Stage) (timeline, error) {
	header := func() {
		say("     %-6s  %-12s  %-12s  %-18s  %s", "", outOfPhaseApps[0], outOfPhaseApps[1], "Stage test (Kargo)", "kargo-latch, and the AnalysisRun (Argo Rollouts)")
	}
	header()
	t := timeline{start: time.Now()}
	syncsAtLatch, previous, statusShown, markedAt := 0.0, "", false, -1
	for tick := 0; markedAt < 0 || tick <= markedAt+flapAfter; tick++ {
		if tick == flapMaxTicks {
			return t, fmt.Errorf("the Freight was not marked verified in %d ticks; the record: %+v", flapMaxTicks, t.latched)
		}
		if err := sleepUntil(ctx, t.start.Add(time.Duration(tick)*flapTick)); err != nil {
			return t, err
		}
		t.ticks = tick + 1
		written := time.Since(t.start)
		apps := make([]driver.App, len(outOfPhaseApps))
		for i, name := range outOfPhaseApps {
			apps[i] = driver.App{Name: name, Health: appHealthAt(i, tick)}
		}
		if err := test.SetAppsHealth(ctx, kargo.HealthProgressing, apps...); err != nil {
			return t, err
		}
		if state := fmt.Sprint(apps); state != previous {
			previous = state
			if t.latched.LatchedAt != nil {
				t.flapsAfterLatch++
			}
		}
		// An App Healthy for the first time in the cycle changes the
		// record: wait until kargo-latch has stored it, so that the line
		// shows what it did with this very tick.
		if t.latched.LatchedAt == nil {
			for _, a := range apps {
				if a.Health != kargo.HealthHealthy {
					continue
				}
				if err := d.waitFor(ctx, a.Name+" seen Healthy", func() bool {
					rec := d.record(ctx, test)
					_, seen := rec.AppsHealthy["argocd/"+a.Name]
					return seen
				}); err != nil {
					return t, err
				}
			}
		}
		rec := d.record(ctx, test)
		var did string
		switch {
		case rec.Phase == latch.PhaseLatched && t.latched.LatchedAt == nil:
			t.latched, syncsAtLatch = rec, d.syncs()
			did = fmt.Sprintf("Latched by %s: every App has been Healthy; Kargo gets %s to start its analysis", rec.LatchedBy, verifyGrace)
		case rec.Phase == latch.PhaseLatched:
			var err error
			if did, err = d.analysisLine(ctx, k, rec, &t); err != nil {
				return t, err
			}
			if len(rec.Marked) > 0 && markedAt < 0 {
				markedAt = tick
				did += fmt.Sprintf("; Freight %s marked verified in test", strings.Join(shortAll(rec.Marked), ", "))
			}
		case len(rec.AppsHealthy) == 0:
			did = fmt.Sprintf("%s; no App seen Healthy yet", rec.Phase)
		default:
			did = fmt.Sprintf("%s; Apps seen Healthy in this cycle: %d/%d %s", rec.Phase, len(rec.AppsHealthy), len(apps), appNames(rec.AppsHealthy))
		}
		say("     t+%.1fs  %-12s  %-12s  %-18s  %s", written.Seconds(), apps[0].Health, apps[1].Health, kargo.HealthProgressing, did)
		if !statusShown && slices.Contains(t.runPhases, "Running") {
			statusShown = true
			d.showStatus()
			header()
		}
	}
	// The last tick lasts as long as the others.
	if err := sleepUntil(ctx, t.start.Add(time.Duration(t.ticks)*flapTick)); err != nil {
		return t, err
	}
	t.syncsAfterLatch = int(d.syncs() - syncsAtLatch)
	return t, nil
}

// analysisLine is what a tick after the latch shows: the grace, or the
// AnalysisRun kargo-latch started and its phase as Argo Rollouts wrote it.
func (d *demo) analysisLine(ctx context.Context, k *driver.Kargo, rec latch.Record, t *timeline) (string, error) {
	a := rec.Analysis
	if a == nil || a.Run == "" {
		return "Latched; waiting for Kargo (the grace)", nil
	}
	run, err := k.AnalysisRun(ctx, project, a.Run)
	if err != nil {
		return "", err
	}
	phase := driver.AnalysisRunPhase(run)
	if phase == "" {
		phase = "not picked up yet"
	}
	if n := len(t.runPhases); n == 0 || t.runPhases[n-1] != phase {
		t.runPhases = append(t.runPhases, phase)
		if n == 0 {
			return fmt.Sprintf("started AnalysisRun %s: %s", a.Run, phase), nil
		}
	}
	return "AnalysisRun " + phase, nil
}

// sleepUntil waits for the clock to reach when: the flapping's own pace.
func sleepUntil(ctx context.Context, when time.Time) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(when)):
		return nil
	}
}

// createDownstream creates Stage uat, which requests the Warehouse's
// Freight from Stage test instead of directly, and gives it the status of a
// Stage Kargo has reconciled but never promoted to.
func (d *demo) createDownstream(ctx context.Context, k *driver.Kargo) error {
	name := downstream
	if _, err := k.CreateStage(ctx, project, name, nil, driver.WithUpstream(upstream)); err != nil {
		return err
	}
	stages := d.admin.Resource(kargo.StagesResource).Namespace(project)
	status, _ := json.Marshal(map[string]any{"status": map[string]any{"observedGeneration": 2}})
	if _, err := stages.Patch(ctx, name, types.MergePatchType, status, metav1.PatchOptions{FieldManager: driver.FieldManager}, "status"); err != nil {
		return fmt.Errorf("writing the status of Stage %s: %w", name, err)
	}
	return nil
}

// availableToDownstream applies Kargo's availability rule to one Freight
// and Stage uat (driver.AvailableTo).
func (d *demo) availableToDownstream(ctx context.Context, freight string) (bool, string, error) {
	return driver.New(d.admin).AvailableTo(ctx, project, downstream, freight)
}

// record is the Stage's latch record.
func (d *demo) record(ctx context.Context, s *driver.Stage) latch.Record {
	u, err := s.Get(ctx)
	if err != nil {
		return latch.Record{}
	}
	r, _ := latch.Decode(u.GetAnnotations()[api.StateAnnotation])
	return r
}

// appNames lists the Apps of a record's appsHealthy by name.
func appNames(apps map[string]time.Time) string {
	var names []string
	for _, k := range slices.Sorted(maps.Keys(apps)) {
		names = append(names, k[strings.LastIndex(k, "/")+1:])
	}
	return "(" + strings.Join(names, ", ") + ")"
}

// short is a Freight name as people see it: its first 7 hex digits.
func short(freight string) string { return freight[:min(7, len(freight))] }

func shortAll(freight []string) []string {
	out := make([]string, len(freight))
	for i, f := range freight {
		out[i] = short(f)
	}
	return out
}
