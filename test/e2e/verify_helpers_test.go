package e2e

import (
	"context"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/controller/verification"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// verifyOnLatch are the annotations of a Stage that verifies on latch,
// marks verified and pauses on failure.
var verifyOnLatch = map[string]string{
	api.VerifyOnLatchAnnotation:  "true",
	api.MarkVerifiedAnnotation:   "true",
	api.PauseOnFailureAnnotation: "true",
}

// verifySettings are fastSettings with a one-second grace for Kargo.
func verifySettings() latch.Settings {
	s := fastSettings()
	s.VerifyGrace, s.VerifyPickupTimeout = time.Second, time.Minute
	return s
}

// webCheck makes an AnalysisTemplate "web-check" in ns whose one web metric
// asks the endpoint count times, every interval (count 1 when 0).
func webCheck(t *testing.T, ns string, metric *driver.MetricServer, count int, interval string) driver.StageOption {
	t.Helper()
	m := driver.WebMetric("web", metric.URL+"/healthz")
	m.Count, m.Interval = count, interval
	_, err := env.kargo.CreateAnalysisTemplate(context.Background(), ns, "web-check", driver.AnalysisTemplate{Metrics: []driver.Metric{m}})
	must(t, err)
	return driver.WithAnalysis(driver.Verification{Templates: []driver.TemplateRef{{Name: "web-check"}}})
}

// collectionOf is the Stage's freightHistory[0].id as the server has it.
func collectionOf(t *testing.T, s *driver.Stage) string {
	t.Helper()
	u, err := s.Get(ctx)
	must(t, err)
	history, _, _ := unstructured.NestedSlice(u.Object, "status", "freightHistory")
	if len(history) == 0 {
		t.Fatalf("Stage %s has no freightHistory", s.Name)
	}
	id, _ := history[0].(map[string]any)["id"].(string)
	return id
}

// runsOf lists every AnalysisRun of the Stage's current Freight collection,
// by Kargo's own labels, as Kargo's lookup does.
func runsOf(t *testing.T, s *driver.Stage) []unstructured.Unstructured {
	t.Helper()
	runs, err := env.kargo.AnalysisRuns(ctx, s.Namespace, s.Name, collectionOf(t, s))
	must(t, err)
	return runs
}

// waitAnalysis waits until the record's analysis satisfies cond, and
// returns the record.
func waitAnalysis(t *testing.T, s *driver.Stage, what string, cond func(*latch.Analysis) bool) latch.Record {
	t.Helper()
	var r latch.Record
	waitLong(t, what+" on "+s.Name, 2*time.Minute, func() bool {
		r = stageRecord(t, s)
		return r.Analysis != nil && cond(r.Analysis)
	})
	return r
}

// assertOneOwnRun checks that the collection has exactly one run, kargo-latch's,
// in Kargo's shape: its labels, the promotion annotation, owner references
// to the Freight, and the marker.
func assertOneOwnRun(t *testing.T, s *driver.Stage, freight string) unstructured.Unstructured {
	t.Helper()
	runs := runsOf(t, s)
	if len(runs) != 1 {
		t.Fatalf("%d AnalysisRuns for the collection of %s, want exactly 1", len(runs), s.Name)
	}
	run := runs[0]
	l := run.GetLabels()
	if l[verification.MarkerLabel] != verification.MarkerValue || l[verification.StageLabel] != s.Name || l[verification.FreightCollectionLabel] != collectionOf(t, s) {
		t.Errorf("run %s labels = %v", run.GetName(), l)
	}
	if run.GetAnnotations()[verification.PromotionAnnotation] == "" {
		t.Errorf("run %s has no %s annotation", run.GetName(), verification.PromotionAnnotation)
	}
	owners := run.GetOwnerReferences()
	if !slices.ContainsFunc(owners, func(o metav1.OwnerReference) bool { return o.Kind == "Freight" && o.Name == freight }) {
		t.Errorf("run %s owners = %v, want Freight %s", run.GetName(), owners, freight)
	}
	return run
}

// deleteRun deletes an AnalysisRun, as a person might.
func deleteRun(t *testing.T, ns, name string) {
	t.Helper()
	must(t, env.dyn.Resource(verification.AnalysisRunsResource).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{}))
}

// completedAt is the run's status.completedAt as the server has it.
func completedAt(t *testing.T, ns, name string) string {
	t.Helper()
	run, err := env.kargo.AnalysisRun(ctx, ns, name)
	must(t, err)
	at, _, _ := unstructured.NestedString(run.Object, "status", "completedAt")
	return at
}
