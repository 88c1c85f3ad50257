package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/latch"
)

const ourRun = "test.latch-0123456789.abc"

// verifying makes u a Stage with spec.verification, opted into
// verify-on-latch or not, and Kargo's newest verification of its current
// Freight collection (freightHistory[0].verificationHistory[0]) when kargo
// is not nil.
func verifying(u *unstructured.Unstructured, onLatch bool, kargo map[string]any) *unstructured.Unstructured {
	u.Object["spec"] = map[string]any{"verification": map[string]any{
		"analysisTemplates": []any{map[string]any{"name": "smoke"}},
	}}
	if onLatch {
		a := u.GetAnnotations()
		if a == nil {
			a = map[string]string{}
		}
		a[api.VerifyOnLatchAnnotation] = "true"
		u.SetAnnotations(a)
	}
	if kargo != nil {
		history := u.Object["status"].(map[string]any)["freightHistory"].([]any)
		history[0].(map[string]any)["verificationHistory"] = []any{kargo}
	}
	return u
}

// kargoVerifies is a VerificationInfo as Kargo writes it.
func kargoVerifies(id, phase, run, message string) map[string]any {
	v := map[string]any{"id": id, "phase": phase, "message": message}
	if run != "" {
		v["analysisRun"] = map[string]any{"name": run, "namespace": "project"}
	}
	return v
}

// latchedOn is a record of a cycle of Freight collection "abc" (as stage
// writes it) that latched ago, with analysis a.
func latchedOn(ago time.Duration, a *latch.Analysis) latch.Record {
	return inCycle(latch.PhaseLatched, func(r *latch.Record) {
		r.FreightID, r.LatchedAt, r.Analysis = "abc", ptr(now.Add(-ago)), a
	})
}

func ours(phase latch.VerificationPhase, edit func(*latch.Analysis)) *latch.Analysis {
	a := &latch.Analysis{ID: ourRun, Actor: latch.Actor, Run: ourRun, Phase: phase, Attempt: 1, StartTime: ago(time.Minute)}
	if edit != nil {
		edit(a)
	}
	return a
}

// The ANALYSIS column says who verifies the current cycle, kargo-latch or
// Kargo, and its phase; never a latch as a passed analysis.
func TestAnalysisCell(t *testing.T) {
	for name, c := range map[string]struct {
		stage    *unstructured.Unstructured
		want     string
		wantRun  string
		wantNone bool // no analysis at all: no spec.verification
	}{
		"no spec.verification": {
			stage: stage(t, nil, []string{"f1"}, latchedOn(time.Minute, nil)), want: "-", wantRun: "-", wantNone: true,
		},
		// The latch's own verdict (record.verification) says Successful:
		// that is health, not the analysis, which never ran.
		"latched, the latch's verdict Successful, no analysis": {
			stage: verifying(stage(t, nil, []string{"f1"}, inCycle(latch.PhaseLatched, func(r *latch.Record) {
				r.FreightID = "abc"
				r.Verification = &latch.VerificationRecord{ID: "v1", Actor: latch.Actor, Phase: latch.VerificationSuccessful, Message: "every Application was Healthy"}
			})), false, nil),
			want: "not started", wantRun: "-",
		},
		"verify-on-latch, latched within the grace": {
			stage: verifying(stage(t, nil, []string{"f1"}, latchedOn(3*time.Second, nil)), true, nil), want: "waiting for Kargo", wantRun: "-",
		},
		"verify-on-latch, latched past the grace, nothing started": {
			stage: verifying(stage(t, nil, []string{"f1"}, latchedOn(5*time.Minute, nil)), true, nil), want: "not started", wantRun: "-",
		},
		"verify-on-latch, not latched yet": {
			stage: verifying(stage(t, nil, []string{"f1"}, inCycle(latch.PhasePromoted, nil)), true, nil), want: "not started", wantRun: "-",
		},
		"kargo-latch's run, not picked up yet": {
			stage: verifying(stage(t, nil, []string{"f1"}, latchedOn(time.Minute, ours("", nil))), true, nil),
			want:  "kargo-latch: Pending", wantRun: ourRun,
		},
		"kargo-latch's run, no analysis controller took it": {
			stage: verifying(stage(t, nil, []string{"f1"}, latchedOn(time.Minute, ours("", func(a *latch.Analysis) { a.PickupReported = true }))), true, nil),
			want:  "kargo-latch: not picked up", wantRun: ourRun,
		},
		"kargo-latch's run, Running": {
			stage: verifying(stage(t, nil, []string{"f1"}, latchedOn(time.Minute, ours(latch.VerificationRunning, nil))), true, nil),
			want:  "kargo-latch: Running", wantRun: ourRun,
		},
		"kargo-latch's run, adopted by Kargo": {
			stage: verifying(stage(t, nil, []string{"f1"}, latchedOn(time.Minute, ours(latch.VerificationSuccessful, nil))), true,
				kargoVerifies("k1", "Successful", ourRun, "")),
			want: "kargo-latch: Successful", wantRun: ourRun,
		},
		"Kargo's own verification, no verify-on-latch, no record of it": {
			stage: verifying(stage(t, nil, []string{"f1"}, latchedOn(time.Minute, nil)), false, kargoVerifies("k1", "Running", "test.01abc.abc", "")),
			want:  "kargo: Running", wantRun: "test.01abc.abc",
		},
		"Kargo's own, the record lags behind Kargo's status": {
			stage: verifying(stage(t, nil, []string{"f1"}, latchedOn(time.Minute, &latch.Analysis{ID: "k1", Actor: latch.KargoActor, Phase: latch.VerificationRunning})),
				true, kargoVerifies("k1", "Successful", "test.01abc.abc", "")),
			want: "kargo: Successful", wantRun: "test.01abc.abc",
		},
		"Kargo reverified after kargo-latch's run was aborted": {
			stage: verifying(stage(t, nil, []string{"f1"}, latchedOn(time.Minute, ours(latch.VerificationAborted, nil))), true,
				kargoVerifies("k2", "Running", "test.01def.abc", "")),
			want: "kargo: Running", wantRun: "test.01def.abc",
		},
		"Kargo's status is of another Freight collection than the cycle's": {
			stage: verifying(stage(t, nil, []string{"f1"}, inCycle(latch.PhaseLatched, func(r *latch.Record) { r.FreightID = "older" })), false,
				kargoVerifies("k1", "Successful", "test.01abc.abc", "")),
			want: "not started", wantRun: "-",
		},
		"no record: Kargo's status alone": {
			stage: verifying(stage(t, nil, []string{"f1"}, latch.Record{}), false, kargoVerifies("k1", "Failed", "test.01abc.abc", "metric failed")),
			want:  "kargo: Failed", wantRun: "test.01abc.abc",
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := row(c.stage, nil)
			if (r.Analysis == nil) != c.wantNone {
				t.Fatalf("analysis %+v, want none: %v", r.Analysis, c.wantNone)
			}
			if got := analysisCell(r, now); got != c.want {
				t.Errorf("ANALYSIS = %q, want %q", got, c.want)
			}
			if got := runCell(r); got != c.wantRun {
				t.Errorf("ANALYSISRUN = %q, want %q", got, c.wantRun)
			}
		})
	}
}

// -o wide adds the AnalysisRun; -o json carries who verifies, apart from
// the latch record's own verdict.
func TestStatusShowsTheAnalysis(t *testing.T) {
	running := verifying(stage(t, nil, []string{"f1"}, latchedOn(time.Minute, ours(latch.VerificationRunning, nil))), true, nil)
	plain := stage(t, nil, []string{"f2"}, latchedOn(time.Minute, nil))
	plain.SetName("other")
	rows := rows([]*unstructured.Unstructured{running, plain}, nil)
	var b bytes.Buffer
	if err := render(&b, rows, "wide", false, now); err != nil {
		t.Fatal(err)
	}
	want := `
STAGE   PHASE     APPS   PAUSED   REASON   PAUSES   HELD   SINCE     LATCHED   ANALYSIS               VERIFIED   ANALYSISRUN
other   Latched   -      no       -        -        -      60s ago   60s ago   -                      -          -
test    Latched   -      no       -        -        -      60s ago   60s ago   kargo-latch: Running   -          ` + ourRun + `
`
	if diff := cmp.Diff(strings.TrimPrefix(want, "\n"), trimLines(b.String())); diff != "" {
		t.Errorf("wide table (-want +got):\n%s", diff)
	}
	b.Reset()
	if err := render(&b, rows[1:], "json", false, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"analysis": {`, `"verifyOnLatch": true`, `"by": "kargo-latch"`, `"phase": "Running"`, `"analysisRun": "` + ourRun + `"`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("-o json has no %s:\n%s", want, b.String())
		}
	}
}

func TestStatusRefusesAnUnknownOutput(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Run(t.Context(), []string{"status", "-o", "xml"}, &out, &errOut); code != ExitUsage ||
		!strings.Contains(errOut.String(), "use table, wide, json or yaml") {
		t.Errorf("status -o xml: exit %d: %s", code, errOut.String())
	}
}

// prodVerifying is prodStage with spec.verification, verify-on-latch or
// not, and Kargo's newest verification of the current collection.
func prodVerifying(view kargoView, rec latch.Record, onLatch bool, kargo map[string]any) *unstructured.Unstructured {
	u := prodStage(view, rec)
	if kargo != nil && view.freightID == "" {
		panic("Kargo's verification needs a freightHistory")
	}
	return verifying(u, onLatch, kargo)
}

// prodRun is kargo-latch's run of promo2's cycle.
const prodRun = "prod.latch-0123456789.fc-" + promo2

func prodOurs(phase latch.VerificationPhase, message string) func(*latch.Record) {
	return func(r *latch.Record) {
		r.Analysis = &latch.Analysis{ID: prodRun, Actor: latch.Actor, Run: prodRun, Phase: phase, Message: message, Attempt: 1}
	}
}

// With verify-on-latch, verified needs this cycle's analysis to have
// passed (kargo-latch's run or Kargo's) as well as the Freight verified in
// the Stage; an analysis that ends Failed, Error or Inconclusive ends the
// wait with its own outcome.
func TestJudgeVerifiedWithAnAnalysis(t *testing.T) {
	current := kargoView{last: promo2, lastPhase: promotionSucceeded, freightID: "fc-" + promo2, freight: []string{"f2"}}
	verifiedAt := func(at *time.Time) func(string) (*time.Time, bool) {
		return func(f string) (*time.Time, bool) { return at, f == "f2" }
	}
	notVerified := func(string) (*time.Time, bool) { return nil, false }
	latched := func(edit func(*latch.Record)) latch.Record { return cycleOf(promo2, latch.PhaseLatched, edit) }
	for name, c := range map[string]struct {
		rec        latch.Record
		onLatch    bool
		kargo      map[string]any
		verifiedIn func(string) (*time.Time, bool)
		want       outcome
		message    string
	}{
		"latched, no verification started yet": {
			rec: latched(nil), onLatch: true, verifiedIn: notVerified,
			want: waiting, message: "Latched at " + ago(5*time.Minute).Format(time.RFC3339) + "; its Freight is not verified in the Stage yet; " +
				"no verification of the cycle has started: once the cycle has latched, kargo-latch starts the Stage's analysis (verify-on-latch)",
		},
		"kargo-latch's run is Running": {
			rec: latched(prodOurs(latch.VerificationRunning, "")), onLatch: true, verifiedIn: notVerified,
			want: waiting, message: "kargo-latch's AnalysisRun " + prodRun + " (verify-on-latch) is Running",
		},
		"kargo-latch's run not picked up yet": {
			rec: latched(prodOurs("", "")), onLatch: true, verifiedIn: notVerified,
			want: waiting, message: "kargo-latch's AnalysisRun " + prodRun + " (verify-on-latch) is Pending",
		},
		// Freight verified long ago (a rollback) and latched: without
		// verify-on-latch that is verified; with it, this cycle's analysis
		// has to pass first.
		"verified in an earlier cycle, this cycle's run Running": {
			rec: latched(prodOurs(latch.VerificationRunning, "")), onLatch: true, verifiedIn: verifiedAt(ago(time.Hour)),
			want: waiting, message: "Freight f2 is verified in the Stage, but this cycle's analysis has not passed; kargo-latch's AnalysisRun " + prodRun + " (verify-on-latch) is Running",
		},
		"kargo-latch's run Successful, Freight not marked yet": {
			rec: latched(prodOurs(latch.VerificationSuccessful, "")), onLatch: true, verifiedIn: notVerified,
			want: waiting, message: "its Freight is not verified in the Stage yet; kargo-latch's AnalysisRun " + prodRun + " (verify-on-latch) is Successful",
		},
		"kargo-latch's run Successful, Freight marked": {
			rec: latched(func(r *latch.Record) {
				prodOurs(latch.VerificationSuccessful, "")(r)
				r.Marked = []string{"f2"}
			}), onLatch: true,
			want: reached, message: "Freight f2 is verified in the Stage (marked by kargo-latch when the cycle latched), and its analysis passed: kargo-latch's AnalysisRun " + prodRun + " (verify-on-latch) is Successful",
		},
		"Kargo's own verification Successful, Freight verified by Kargo": {
			rec: latched(nil), onLatch: true, kargo: kargoVerifies("k1", "Successful", "prod.01k.fc", ""), verifiedIn: verifiedAt(ago(time.Minute)),
			want: reached, message: "and its analysis passed: Kargo's verification (AnalysisRun prod.01k.fc) is Successful",
		},
		"Kargo's own verification Running": {
			rec: latched(nil), onLatch: true, kargo: kargoVerifies("k1", "Running", "prod.01k.fc", ""), verifiedIn: notVerified,
			want: waiting, message: "Kargo's verification (AnalysisRun prod.01k.fc) is Running",
		},
		"kargo-latch's run Failed: the cycle failed": {
			rec: cycleOf(promo2, latch.PhaseFailed, func(r *latch.Record) {
				prodOurs(latch.VerificationFailed, "metric error-rate assessed Failed")(r)
				r.Failure = &latch.Failure{Reason: latch.ReasonVerificationFailed, Message: "AnalysisRun " + prodRun + " of the cycle: Failed: metric error-rate assessed Failed", At: now}
			}), onLatch: true, verifiedIn: notVerified,
			want: analysisFailed, message: "failed: its verification did not pass: VerificationFailed: AnalysisRun " + prodRun,
		},
		"kargo-latch's run Inconclusive, the record's failure not written yet": {
			rec: latched(prodOurs(latch.VerificationInconclusive, "")), onLatch: true, verifiedIn: notVerified,
			want: analysisFailed, message: "its verification did not pass: kargo-latch's AnalysisRun " + prodRun + " (verify-on-latch) is Inconclusive",
		},
		"Kargo's Error": {
			rec: latched(nil), onLatch: true, kargo: kargoVerifies("k1", "Error", "prod.01k.fc", "no such template"), verifiedIn: notVerified,
			want: analysisFailed, message: "Kargo's verification (AnalysisRun prod.01k.fc) is Error: no such template",
		},
		// Kargo follows an Inconclusive run of its own to its end and does
		// not verify: without verify-on-latch too, waiting on would hang.
		"no verify-on-latch, Kargo's Inconclusive": {
			rec: latched(nil), kargo: kargoVerifies("k1", "Inconclusive", "prod.01k.fc", ""), verifiedIn: notVerified,
			want: analysisFailed, message: "Kargo's verification (AnalysisRun prod.01k.fc) is Inconclusive",
		},
		"no verify-on-latch, verified by Kargo as before": {
			rec: latched(nil), kargo: kargoVerifies("k1", "Successful", "prod.01k.fc", ""), verifiedIn: verifiedAt(ago(time.Minute)),
			want: reached, message: "Freight f2 is verified in the Stage",
		},
		"no verify-on-latch, the cycle failed with Kargo's VerificationError": {
			rec: cycleOf(promo2, latch.PhaseFailed, func(r *latch.Record) {
				r.Failure = &latch.Failure{Reason: latch.ReasonVerificationError, Message: "verification k1 errored", At: now}
			}),
			want: analysisFailed, message: "failed: its verification did not pass: VerificationError: verification k1 errored",
		},
		"a person aborted Kargo's verification: waited on": {
			rec: latched(nil), onLatch: true, kargo: kargoVerifies("k1", "Failed", "prod.01k.fc", latch.UserAbortMessage), verifiedIn: notVerified,
			want: waiting, message: "only by a new verification (reverify it in Kargo)",
		},
		"a cycle that failed otherwise still fails as before": {
			rec: cycleOf(promo2, latch.PhaseFailed, nil), onLatch: true,
			want: failed, message: "failed: LatchDeadlineExceeded",
		},
	} {
		t.Run(name, func(t *testing.T) {
			u := prodVerifying(current, c.rec, c.onLatch, c.kargo)
			v := judge(forVerified, promo2, sighting{stage: u, verifiedIn: c.verifiedIn})
			if v.outcome != c.want || !strings.Contains(v.message, c.message) {
				t.Errorf("judge = %v %q,\nwant %v containing %q", v.outcome, v.message, c.want, c.message)
			}
		})
	}
}

// A pipeline waits for verified on a verify-on-latch Stage: the progress
// says who verifies and how far; the wait ends when kargo-latch's run has
// passed and the Freight is marked.
func TestWaitForVerifiedFollowsTheAnalysis(t *testing.T) {
	t.Parallel()
	view := kargoView{last: promo2, lastPhase: promotionSucceeded, freightID: "fc-" + promo2, freight: []string{"f2"}}
	client := fakeClient(prodVerifying(view, cycleOf(promo2, latch.PhasePromoted, nil), true, nil))
	w := startWait(t.Context(), client, waitOptions{condition: "verified"})
	w.progressed(t, "is Promoted, waiting for the latch; no verification of the cycle has started")
	updateStage(t, client, prodVerifying(view, cycleOf(promo2, latch.PhaseLatched, prodOurs(latch.VerificationRunning, "")), true, nil))
	w.progressed(t, "kargo-latch's AnalysisRun "+prodRun+" (verify-on-latch) is Running")
	updateStage(t, client, prodVerifying(view, cycleOf(promo2, latch.PhaseLatched, func(r *latch.Record) {
		prodOurs(latch.VerificationSuccessful, "")(r)
		r.Marked = []string{"f2"}
	}), true, nil))
	if err := w.result(t); err != nil {
		t.Fatalf("wait: %v", err)
	}
	if got, want := w.stdout.String(), "stage project/prod: Freight f2 is verified in the Stage (marked by kargo-latch when the cycle latched), and its analysis passed: kargo-latch's AnalysisRun "+prodRun+" (verify-on-latch) is Successful\n"; got != want {
		t.Errorf("stdout %q,\nwant %q", got, want)
	}
}

// The analysis fails: the wait exits 5 (not 1), naming the run and its
// message, and prints nothing on stdout.
func TestWaitForVerifiedExitsWhenTheAnalysisFails(t *testing.T) {
	t.Parallel()
	view := kargoView{last: promo2, lastPhase: promotionSucceeded, freightID: "fc-" + promo2, freight: []string{"f2"}}
	client := fakeClient(prodVerifying(view, cycleOf(promo2, latch.PhaseLatched, prodOurs(latch.VerificationRunning, "")), true, nil))
	w := startWait(t.Context(), client, waitOptions{condition: "verified", promotion: promo2})
	w.progressed(t, "(verify-on-latch) is Running")
	updateStage(t, client, prodVerifying(view, cycleOf(promo2, latch.PhaseLatched, prodOurs(latch.VerificationFailed, "metric error-rate assessed Failed")), true, nil))
	err := w.result(t)
	want := "stage project/prod: the cycle of promotion " + promo2 + ": its verification did not pass: kargo-latch's AnalysisRun " + prodRun +
		" (verify-on-latch) is Failed: metric error-rate assessed Failed"
	if exitCode(err, true) != ExitAnalysisFailed || err == nil || err.Error() != want {
		t.Errorf("wait: %v (exit %d),\nwant exit 5: %s", err, exitCode(err, true), want)
	}
	if w.stdout.String() != "" {
		t.Errorf("stdout %q, want nothing", w.stdout.String())
	}
	var out, errOut bytes.Buffer
	if code := Run(t.Context(), []string{"wait", "-h"}, &out, &errOut); code != ExitOK || !strings.Contains(out.String(), "\n  5    --for=verified") {
		t.Errorf("wait -h does not explain exit 5:\n%s", out.String())
	}
}
