package e2e

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/test/cluster"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// TestRolloutsRunsKargosAnalysis proves the analysis infrastructure the
// verify-on-latch tests stand on, with no operator: the driver plays
// Kargo's verification of a Stage with a web-metric AnalysisTemplate, and
// the real Argo Rollouts analysis controller runs the AnalysisRun Kargo
// creates: Successful while the endpoint answers ok (and Kargo marks the
// Freight verified at the run's finish), Failed once it answers fail.
func TestRolloutsRunsKargosAnalysis(t *testing.T) {
	ctx := context.Background()
	env.rollouts(t)
	ns := env.newProject(t)
	metric := metricServer(t)
	_, err := env.kargo.CreateAnalysisTemplate(ctx, ns, "smoke", driver.AnalysisTemplate{
		Metrics: []driver.Metric{driver.WebMetric("web", metric.URL+"/{{args.path}}")},
		Args:    []driver.TemplateArg{{Name: "path"}},
	})
	must(t, err)
	s := env.createStage(t, ns, "test", nil, driver.WithAnalysis(driver.Verification{
		Templates: []driver.TemplateRef{{Name: "smoke"}},
		Args:      []driver.Arg{{Name: "path", Value: "healthz"}},
	}))

	verify := func(t *testing.T) (run *unstructured.Unstructured, freight, phase string) {
		t.Helper()
		_, err := s.FinishPromotion(ctx, "Succeeded")
		must(t, err)
		must(t, s.SetHealth(ctx, kargo.HealthHealthy))
		name, adopted, err := s.KargoAdoptOrStartVerification(ctx)
		must(t, err)
		if adopted {
			t.Fatalf("Kargo adopted %s: no run existed for the new Freight", name)
		}
		phase = followVerification(t, s)
		run, err = env.kargo.AnalysisRun(ctx, ns, name)
		must(t, err)
		freight, err = s.CurrentFreight(ctx)
		must(t, err)
		stage, err := s.Get(ctx)
		must(t, err)
		history, _, _ := unstructured.NestedSlice(stage.Object, "status", "freightHistory")
		runs, err := env.kargo.AnalysisRuns(ctx, ns, s.Name, history[0].(map[string]any)["id"].(string))
		must(t, err)
		if len(runs) != 1 {
			t.Errorf("%d AnalysisRuns for the collection, want 1", len(runs))
		}
		return run, freight, phase
	}

	t.Run("success", func(t *testing.T) {
		before := metric.Requests()
		run, freight, phase := verify(t)
		if phase != "Successful" || driver.AnalysisRunPhase(run) != "Successful" {
			t.Fatalf("verification %s, run %s, want both Successful", phase, driver.AnalysisRunPhase(run))
		}
		if metric.Requests() <= before {
			t.Errorf("the endpoint answered %d requests, as before the run: the metric was not measured", metric.Requests())
		}
		f, err := env.kargo.Freight(ctx, ns, freight)
		must(t, err)
		verifiedAt, _, _ := unstructured.NestedString(f.Object, "status", "verifiedIn", s.Name, "verifiedAt")
		completedAt, _, _ := unstructured.NestedString(run.Object, "status", "completedAt")
		if verifiedAt == "" || verifiedAt != completedAt {
			t.Errorf("Freight verifiedIn.%s.verifiedAt = %q, want the run's completedAt %q", s.Name, verifiedAt, completedAt)
		}
	})

	t.Run("failure", func(t *testing.T) {
		metric.SetFailing(true)
		run, freight, phase := verify(t)
		if phase != "Failed" || driver.AnalysisRunPhase(run) != "Failed" {
			t.Fatalf("verification %s, run %s, want both Failed", phase, driver.AnalysisRunPhase(run))
		}
		f, err := env.kargo.Freight(ctx, ns, freight)
		must(t, err)
		if v, ok, _ := unstructured.NestedMap(f.Object, "status", "verifiedIn", s.Name); ok {
			t.Errorf("Freight %s verified in %s (%v) after a failed analysis", freight, s.Name, v)
		}
	})
}

// TestRolloutsRunsAPrometheusMetric proves the prometheus provider against
// the project's own Prometheus (bin/prometheus), scraping the analysis
// controller itself: a query whose only sample is 1 passes the condition,
// the same minus 1 fails it. The query is a template arg that
// spec.verification.args sets, as teams pass theirs.
func TestRolloutsRunsAPrometheusMetric(t *testing.T) {
	ctx := context.Background()
	r := env.rollouts(t)
	prom := startPrometheus(t, "127.0.0.1:"+strconv.Itoa(r.MetricsPort))
	ns := env.newProject(t)
	_, err := env.kargo.CreateAnalysisTemplate(ctx, ns, "scraped", driver.AnalysisTemplate{
		Metrics: []driver.Metric{driver.PrometheusMetric("up", prom.url, "{{args.query}}", "len(result) == 1 && result[0] == 1")},
		Args:    []driver.TemplateArg{{Name: "query"}},
	})
	must(t, err)
	for query, want := range map[string]string{
		`up{job="kargo-latch"}`:     "Successful",
		`up{job="kargo-latch"} - 1`: "Failed",
	} {
		s := env.createStage(t, ns, "test-"+strings.ToLower(want), nil, driver.WithAnalysis(driver.Verification{
			Templates: []driver.TemplateRef{{Name: "scraped"}},
			Args:      []driver.Arg{{Name: "query", Value: query}},
		}))
		_, err := s.FinishPromotion(ctx, "Succeeded")
		must(t, err)
		must(t, s.SetHealth(ctx, kargo.HealthHealthy))
		name, _, err := s.KargoAdoptOrStartVerification(ctx)
		must(t, err)
		if phase := followVerification(t, s); phase != want {
			run, err := env.kargo.AnalysisRun(ctx, ns, name)
			must(t, err)
			t.Errorf("query %s: verification %s, want %s; run status %v", query, phase, want, run.Object["status"])
		}
	}
}

// TestRolloutsInstanceIDRunsOnlyItsRuns proves Kargo's
// ROLLOUTS_CONTROLLER_INSTANCE_ID setting end to end: a run labelled with
// an instance ID is run by the controller started with that --instance-id,
// and not touched by the shared one, which runs only unlabelled runs.
func TestRolloutsInstanceIDRunsOnlyItsRuns(t *testing.T) {
	ctx := context.Background()
	shared := env.rollouts(t)
	own, err := env.cluster.StartRollouts(ctx, cluster.RolloutsOptions{InstanceID: "e2e-own"})
	must(t, err)
	t.Cleanup(own.Stop)
	ns := env.newProject(t)
	metric := metricServer(t)
	_, err = env.kargo.CreateAnalysisTemplate(ctx, ns, "smoke", driver.AnalysisTemplate{Metrics: []driver.Metric{driver.WebMetric("web", metric.URL)}})
	must(t, err)
	s, err := env.kargo.WithRolloutsControllerInstanceID("e2e-own").CreateStage(ctx, ns, "test", nil,
		driver.WithAnalysis(driver.Verification{Templates: []driver.TemplateRef{{Name: "smoke"}}}))
	must(t, err)
	_, err = s.FinishPromotion(ctx, "Succeeded")
	must(t, err)
	must(t, s.SetHealth(ctx, kargo.HealthHealthy))
	name, _, err := s.KargoAdoptOrStartVerification(ctx)
	must(t, err)
	if phase := followVerification(t, s); phase != "Successful" {
		t.Fatalf("verification %s, want Successful", phase)
	}
	for _, c := range []struct {
		r    *cluster.Rollouts
		want bool
	}{{own, true}, {shared, false}} {
		ran, err := c.r.LogContains(name)
		must(t, err)
		if ran != c.want {
			t.Errorf("the controller with instance ID %q logged the run %s: %v, want %v", c.r.InstanceID, name, ran, c.want)
		}
	}
}
