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
	one, err := k.CreateStage(ctx, "ns", "one", nil)
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

	busy, err := k.CreateStage(ctx, "ns", "busy", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := busy.WriteBusyStatus(ctx, kargo.HealthHealthy); err != nil {
		t.Fatal(err)
	}
	if checks, outputs := countsOf(t, busy); checks != 1 || outputs != 1 {
		t.Errorf("a busy Stage: %d checks, %d output entries; want 1 and 1", checks, outputs)
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
