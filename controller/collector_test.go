package controller

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/metrics"
)

// A replica that never syncs (a standby, or one that lost its Lease)
// exports what the Stages store now: the pause the leader stored, then its
// resume. Set gauges would export nothing here, or keep the pause forever.
func TestStandbyGaugesFollowTheStoredRecord(t *testing.T) {
	s := newStandby(t,
		healthyStage("prod", map[string]any{api.StateAnnotation: latchedRecord("hold").Encode()}),
		healthyStage("qa", map[string]any{api.StateAnnotation: latch.Record{Phase: latch.PhaseIdle}.Encode()}),
		healthyStage("new", nil),
		healthyStage("junk", map[string]any{api.StateAnnotation: "{not a record"}),
		stagePause("hold", "prod", "Degraded"),
	)
	s.waitSeries("the stored pause", "paused{prod,Degraded}=1", "phase{prod}=Latched", "phase{qa}=Idle")

	// The new leader resumes: the pause is deleted, then the record that
	// shows the resume is stored.
	if err := s.client.Resource(v1alpha1.StagePausesResource).Namespace("shop").Delete(context.Background(), "hold", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitSeries("the resume (the delete)", "phase{prod}=Latched", "phase{qa}=Idle")
	s.setRecord("prod", latchedRecord())
	s.waitSeries("the stored resume", "phase{prod}=Latched", "phase{qa}=Idle")
}

// A pause counts once the leader has stored it in the record (with the
// label and the StagePaused Event), and its reason is the first covering
// pause's by name, a project-wide one included, as the syncs pick it.
func TestPausedGaugeNeedsTheRecordAndTakesTheFirstReason(t *testing.T) {
	s := newStandby(t, healthyStage("prod", map[string]any{api.StateAnnotation: latchedRecord().Encode()}),
		stagePause("m-failure", "prod", "PromotionFailed"))
	s.waitCached("m-failure")
	s.waitSeries("a pause the record does not list yet", "phase{prod}=Latched")

	s.setRecord("prod", latchedRecord("m-failure"))
	s.waitSeries("the stored pause", "paused{prod,PromotionFailed}=1", "phase{prod}=Latched")

	pauses := s.client.Resource(v1alpha1.StagePausesResource).Namespace("shop")
	if _, err := pauses.Create(context.Background(), stagePause("all", "*", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitSeries("the project-wide pause, first by name and Manual when empty", "paused{prod,Manual}=1", "phase{prod}=Latched")

	// A pause being deleted covers nothing (a failure's pause is held by
	// its finalizer until the resume is stored).
	all, err := pauses.Get(context.Background(), "all", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	all.SetDeletionTimestamp(&now)
	if _, err := pauses.Update(context.Background(), all, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.waitSeries("the pause being deleted to count no more", "paused{prod,PromotionFailed}=1", "phase{prod}=Latched")
}

// Until the caches are synced a walk yields nothing: half the caches would
// tell half the truth.
func TestNoGaugesBeforeTheCachesSync(t *testing.T) {
	c, err := New(Config{Dynamic: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		kargo.StagesResource: "StageList", kargo.PromotionsResource: "PromotionList", v1alpha1.StagePausesResource: "StagePauseList",
	}), Kube: kubefake.NewClientset(), Metrics: metrics.New(prometheus.NewRegistry(), "test")})
	if err != nil {
		t.Fatal(err)
	}
	// Put a Stage in the cache by hand, as a half-done initial list would.
	stage := kargo.StageFromUnstructured(healthyStage("prod", map[string]any{api.StateAnnotation: latchedRecord().Encode()}))
	indexer := c.stageInformersFor("shop")[0].GetIndexer()
	if err := indexer.Add(stage); err != nil {
		t.Fatal(err)
	}
	if len(indexer.ListKeys()) != 1 {
		t.Fatal("the Stage is not in the cache")
	}
	for st := range newStageStates(c).all {
		t.Errorf("walk before the caches synced yielded %+v", st)
	}
}
