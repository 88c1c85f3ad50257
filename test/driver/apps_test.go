package driver

import (
	"context"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/kargo-latch/kargo-latch/kargo"
)

func fakeKargo() *Kargo {
	return New(dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		kargo.StagesResource: "StageList", kargo.PromotionsResource: "PromotionList", kargo.FreightsResource: "FreightList",
	}))
}

// countsOf reads how many health checks the Stage's last promotion left and
// how many entries its health output has, as kargo-latch counts them.
func countsOf(t *testing.T, s *Stage) (checks, outputs int) {
	t.Helper()
	u, err := s.Get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	st := kargo.StageFromUnstructured(u).Status
	if st == nil || st.LastPromotion == nil {
		t.Fatal("no lastPromotion")
	}
	c, _, _ := unstructured.NestedSlice(u.Object, "status", "health", "output")
	return st.LastPromotion.HealthChecks, len(c)
}

// Kargo records in every successful Promotion the health checks it left,
// and kargo-latch judges Apps only when the output has an entry per check:
// the driver writes them on every path to a successful lastPromotion.
func TestSuccessfulPromotionsRecordTheirHealthChecks(t *testing.T) {
	ctx := context.Background()
	k := fakeKargo()
	one, err := k.CreateStage(ctx, "ns", "one", nil, WithApps("a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := one.FinishPromotion(ctx, "Succeeded"); err != nil {
		t.Fatal(err)
	}
	if err := one.SetAppsHealth(ctx, kargo.HealthProgressing, App{Name: "a", Health: "Healthy"}, App{Name: "b", Health: "Progressing"}); err != nil {
		t.Fatal(err)
	}
	if checks, outputs := countsOf(t, one); checks != 1 || outputs != 1 {
		t.Errorf("a Stage of one argocd-update step: %d checks, %d output entries; want 1 and 1", checks, outputs)
	}
	if err := one.WriteBusyStatus(ctx, kargo.HealthHealthy); err == nil {
		t.Error("a busy status for a Stage whose health check names other Apps: no error")
	}

	busy, err := k.CreateStage(ctx, "ns", "busy", nil, WithBusyApps())
	if err != nil {
		t.Fatal(err)
	}
	if err := busy.WriteBusyStatus(ctx, kargo.HealthHealthy); err != nil {
		t.Fatal(err)
	}
	if checks, outputs := countsOf(t, busy); checks != 1 || outputs != 1 {
		t.Errorf("a busy Stage: %d checks, %d output entries; want 1 and 1", checks, outputs)
	}
	written := lastHealthCheckApps(t, busy)
	if _, err := busy.FinishPromotion(ctx, "Succeeded"); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(written, lastHealthCheckApps(t, busy)); diff != "" || len(written) != BusyApps {
		t.Errorf("a busy Stage's next Promotion checks other Apps than WriteBusyStatus's (%d; -busy +next):\n%s", len(written), diff)
	}
}

// lastHealthCheckApps names the Apps of the health checks of the Stage's
// lastPromotion, as the server has them.
func lastHealthCheckApps(t *testing.T, s *Stage) []string {
	t.Helper()
	u, err := s.Get(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	checks, _, _ := unstructured.NestedSlice(u.Object, "status", "lastPromotion", "status", "healthChecks")
	var names []string
	for _, c := range checks {
		apps, _, _ := unstructured.NestedSlice(c.(map[string]any), "config", "apps")
		for _, a := range apps {
			names = append(names, a.(map[string]any)["name"].(string))
		}
	}
	return names
}

// SetAppsHealth writes only what Kargo can: an output listing exactly the
// Apps the Stage's health check names, in the check's order.
func TestSetAppsHealthNamesTheChecksApps(t *testing.T) {
	ctx := context.Background()
	k := fakeKargo()
	plain, err := k.CreateStage(ctx, "ns", "plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.SetAppsHealth(ctx, kargo.HealthHealthy, App{Name: "a", Health: "Healthy"}); err == nil {
		t.Error("an App the Stage's health check does not name: no error")
	}
	if err := plain.SetAppsHealth(ctx, kargo.HealthHealthy, App{Name: "plain", Health: "Healthy"}); err != nil {
		t.Errorf("the App named as the Stage: %v", err)
	}
	s, err := k.CreateStage(ctx, "ns", "test", nil, WithApps("a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([][]string{{"a", "b"}}, s.CheckedApps()); diff != "" {
		t.Errorf("CheckedApps (-want +got):\n%s", diff)
	}
	if err := s.SetAppsHealth(ctx, kargo.HealthProgressing, App{Name: "a", Health: "Healthy"}); err == nil {
		t.Error("one of the check's two Apps: no error")
	}
	if err := s.SetAppsHealth(ctx, kargo.HealthProgressing, App{Name: "b", Health: "Progressing"}, App{Name: "a", Health: "Healthy"}); err != nil {
		t.Fatal(err)
	}
	u, err := s.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	output, _, _ := unstructured.NestedSlice(u.Object, "status", "health", "output")
	want := AppsHealth(kargo.HealthProgressing, App{Name: "a", Health: "Healthy"}, App{Name: "b", Health: "Progressing"})["output"]
	if diff := cmp.Diff(want, any(output)); diff != "" {
		t.Errorf("health output (-want +got):\n%s", diff)
	}
	twoChecks, err := k.CreateStage(ctx, "ns", "two", nil, WithHealthChecks(2))
	if err != nil {
		t.Fatal(err)
	}
	if err := twoChecks.SetAppsHealth(ctx, kargo.HealthHealthy, App{Name: "two-1", Health: "Healthy"}); err == nil {
		t.Error("a check of two given no App: no error")
	}
}

// A person's Promotion carries the Stage's promotion template, as Kargo
// copies it: its argocd-update step names the Stage's Apps.
func TestPersonPromotionCopiesTheStagesSteps(t *testing.T) {
	ctx := context.Background()
	k := fakeKargo()
	s, err := k.CreateStage(ctx, "ns", "test", nil, WithApps("a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	name, err := s.CreatePersonPromotion(ctx, "", "kubernetes:dev")
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.promotion(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	u, err := s.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	steps, _, _ := unstructured.NestedSlice(p.Object, "spec", "steps")
	if diff := cmp.Diff(promotionTemplateOf(u), steps); diff != "" || len(steps) != 1 {
		t.Errorf("Promotion's steps (-Stage's template +Promotion's):\n%s", diff)
	}
}

// SetChecksHealth lists in each output entry the Apps its health check
// names, as Kargo does, and writes no entry for a check given no App.
func TestSetChecksHealthNamesTheChecksApps(t *testing.T) {
	ctx := context.Background()
	s, err := fakeKargo().CreateStage(ctx, "ns", "test", nil, WithHealthChecks(2))
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([][]string{{"test-1"}, {"test-2"}}, s.CheckedApps()); diff != "" {
		t.Errorf("CheckedApps (-want +got):\n%s", diff)
	}
	if _, err := s.FinishPromotion(ctx, "Succeeded"); err != nil {
		t.Fatal(err)
	}
	if err := s.SetChecksHealth(ctx, kargo.HealthProgressing, App{Name: "test-2", Health: "Healthy"}); err != nil {
		t.Fatal(err)
	}
	u, err := s.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	st := kargo.StageFromUnstructured(u).Status
	if len(st.Apps) != 1 || st.Apps[0].Name != "test-2" || st.HealthOutputs != 1 || st.LastPromotion.HealthChecks != 2 {
		t.Errorf("Apps %+v, %d output entries of %d checks; want test-2 alone, 1 of 2", st.Apps, st.HealthOutputs, st.LastPromotion.HealthChecks)
	}
	if err := s.SetChecksHealth(ctx, kargo.HealthProgressing, App{Name: "a", Health: "Healthy"}); err == nil {
		t.Error("an App of no health check: no error")
	}
}
