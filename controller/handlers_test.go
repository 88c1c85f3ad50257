package controller

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/clock"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/queue"
)

// sameView decides which Stage updates are synced: a change of anything the
// latch reads must be, and Kargo's rewrites of what it does not read must
// not.
func TestSameViewTellsWhatTheLatchReads(t *testing.T) {
	stage := func(state, health, conditions string) *kargo.Stage {
		u := &unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"name": "s", "namespace": "p", "resourceVersion": "1"},
			"status": map[string]any{
				"health":     map[string]any{"status": health},
				"conditions": []any{map[string]any{"type": "Ready", "message": conditions}},
			},
		}}
		if state != "" {
			u.SetAnnotations(map[string]string{api.StateAnnotation: state})
		}
		return kargo.StageFromUnstructured(u)
	}
	long := func(phase string) string {
		// Over the size from which the mirror deflates a record.
		return `{"version":1,"phase":"` + phase + `","promotion":"p","history":[` +
			`{"id":"a","actor":"x","startTime":"2026-11-30T10:00:00Z","finishTime":"2026-11-30T10:00:00Z","phase":"Successful","message":"` +
			strings.Repeat("m", 900) + `"}]}`
	}
	base := stage(long("Latched"), "Healthy", "one")
	for name, tc := range map[string]struct {
		other *kargo.Stage
		same  bool
	}{
		"Kargo rewrote its conditions":       {stage(long("Latched"), "Healthy", "two"), true},
		"the health changed":                 {stage(long("Latched"), "Unhealthy", "one"), false},
		"the record changed":                 {stage(long("Degraded"), "Healthy", "one"), false},
		"the record was deleted":             {stage("", "Healthy", "one"), false},
		"a small record replaced a long one": {stage(`{"version":1,"phase":"Latched"}`, "Healthy", "one"), false},
	} {
		if got := sameView(base, tc.other); got != tc.same {
			t.Errorf("%s: sameView = %v, want %v", name, got, tc.same)
		}
	}
}

// A Stage update that shows a new failure is synced before every Stage that
// only flaps: it owes a pause. One that shows the same failure again, a
// health change, or a person's abort waits its turn.
func TestNewFailureIsUrgent(t *testing.T) {
	stage := func(health, promotionPhase, verificationPhase, message string) *kargo.Stage {
		status := map[string]any{
			"health":        map[string]any{"status": health},
			"lastPromotion": map[string]any{"name": "p1", "status": map[string]any{"phase": promotionPhase}},
		}
		if verificationPhase != "" {
			status["freightHistory"] = []any{map[string]any{"id": "f1", "verificationHistory": []any{
				map[string]any{"id": "v1", "phase": verificationPhase, "message": message},
			}}}
		}
		return kargo.StageFromUnstructured(&unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"name": "s", "namespace": "p", "resourceVersion": "1"},
			"status":   status,
		}})
	}
	fine := stage("Healthy", "Succeeded", "Successful", "")
	failed := stage("Unhealthy", "Failed", "", "")
	for name, tc := range map[string]struct {
		old, new *kargo.Stage
		urgent   bool
	}{
		"a flap to Progressing":                 {fine, stage("Progressing", "Succeeded", "Successful", ""), false},
		"a flap back to Healthy":                {stage("Progressing", "Succeeded", "", ""), fine, false},
		"Unhealthy fails only after its grace":  {fine, stage("Unhealthy", "Succeeded", "Successful", ""), false},
		"Unknown while a promotion runs":        {fine, stage("Unknown", "Running", "", ""), false},
		"the promotion failed":                  {stage("", "Running", "", ""), stage("", "Failed", "", ""), true},
		"the promotion errored":                 {stage("", "Running", "", ""), stage("", "Errored", "", ""), true},
		"the verification failed":               {stage("Healthy", "Succeeded", "Running", ""), stage("Healthy", "Succeeded", "Failed", ""), true},
		"the verification errored":              {stage("Healthy", "Succeeded", "Running", ""), stage("Healthy", "Succeeded", "Error", ""), true},
		"a person aborted the verification":     {stage("Healthy", "Succeeded", "Running", ""), stage("Healthy", "Succeeded", "Failed", latch.UserAbortMessage), false},
		"Kargo's verification was inconclusive": {stage("Healthy", "Succeeded", "Running", ""), stage("Healthy", "Succeeded", "Inconclusive", ""), false},
		"the same failure again":                {failed, stage("Unknown", "Failed", "", ""), false},
		"a failure shrank (health recovered)":   {failed, stage("Healthy", "Failed", "", ""), false},
		"the failure went away":                 {failed, fine, false},
		"a garbage health is not a failure":     {fine, stage("Exploded", "Succeeded", "Successful", ""), false},
	} {
		if got := showsNewFailure(tc.old, tc.new); got != tc.urgent {
			t.Errorf("%s: showsNewFailure = %v, want %v", name, got, tc.urgent)
		}
	}
}

// The handler puts a Stage that shows a new failure ahead of those queued
// before it.
func TestFailingStageGoesAheadOfTheQueue(t *testing.T) {
	stage := func(name, phase string) *kargo.Stage {
		return kargo.StageFromUnstructured(&unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"name": name, "namespace": "p", "resourceVersion": phase},
			"status":   map[string]any{"lastPromotion": map[string]any{"name": "p1", "status": map[string]any{"phase": phase}}},
		}})
	}
	c := &Controller{}
	stages, urgent := queue.NewWithLanes("", nil, clock.RealClock{})
	defer stages.ShutDown()
	c.work.Store(&workQueues{stages: stages, urgent: urgent})
	c.updateStage(stage("flapping", "Running"), stage("flapping", "Succeeded"))
	c.updateStage(stage("failing", "Running"), stage("failing", "Failed"))
	for _, want := range []string{"failing", "flapping"} {
		key, _ := stages.Get()
		if key.Name != want {
			t.Fatalf("handed out %v, want %s", key, want)
		}
		stages.Done(key)
	}
}

// The running controller syncs a Stage whose promotion failed from the
// urgent lane: the wait is measured, and the pause is made.
func TestFailureIsSyncedFromTheUrgentLane(t *testing.T) {
	prior := latch.Record{Phase: latch.PhaseLatched, Promotion: "p1", FreightID: "F1", ExaminedPromotion: "p1",
		PromotedAt: ptrTime(time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)), LatchedAt: ptrTime(time.Date(2026, 11, 29, 10, 1, 0, 0, time.UTC))}
	f := newFixture(t, false, healthyStage("prod", map[string]any{api.PauseOnFailureAnnotation: "true", api.StateAnnotation: prior.Encode()}))
	f.idle()
	if n := urgentWaits(t, f); n != 0 {
		t.Fatalf("%d urgent syncs before any failure, want 0", n)
	}
	u, err := f.client.Resource(kargo.StagesResource).Namespace("shop").Get(context.Background(), "prod", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u.Object["status"].(map[string]any)["lastPromotion"] = map[string]any{
		"name": "p2", "finishedAt": "2026-11-29T11:00:00Z", "status": map[string]any{"phase": "Failed"},
	}
	if _, err := f.client.Resource(kargo.StagesResource).Namespace("shop").Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitEvent("Warning LatchFailed")
	if n := urgentWaits(t, f); n < 1 {
		t.Errorf("the failure's sync was not urgent (%d urgent waits measured)", n)
	}
}

func urgentWaits(t *testing.T, f *fixture) uint64 {
	t.Helper()
	families, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range families {
		if mf.GetName() == "kargo_latch_urgent_queue_wait_seconds" {
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	return 0
}

// A run kargo-latch started that has just ended Failed, Error or
// Inconclusive fails its cycle: its Stage is urgent. Any other change of a
// run is not.
func TestRunThatJustFailedIsUrgent(t *testing.T) {
	run := func(phase string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"name": "r", "namespace": "p"},
			"status":   map[string]any{"phase": phase},
		}}
	}
	for _, tc := range []struct {
		from, to string
		urgent   bool
	}{
		{"Running", "Failed", true},
		{"Running", "Error", true},
		{"Running", "Inconclusive", true},
		{"", "Failed", true},
		{"Running", "Successful", false},
		{"", "Running", false},
		{"Failed", "Failed", false},
	} {
		if got := runFailedNow(run(tc.from), run(tc.to)); got != tc.urgent {
			t.Errorf("%q → %q: runFailedNow = %v, want %v", tc.from, tc.to, got, tc.urgent)
		}
	}
}

// BenchmarkShowsNewFailure measures the urgent lane's question on every
// Stage update, for a Stage whose last promotion failed and whose
// verification errored (their judgements stay in its status until the next
// promotion): it formats no message and allocates nothing.
func BenchmarkShowsNewFailure(b *testing.B) {
	stage := func(health string) *kargo.Stage {
		return &kargo.Stage{Status: &kargo.StageStatus{Health: health,
			LastPromotion: &kargo.PromotionReference{Name: "prod.abc", Phase: "Failed"},
			Verification:  &kargo.VerificationInfo{ID: "v1", Phase: "Error", Message: "boom"}}}
	}
	o, n := stage("Healthy"), stage("Progressing")
	b.ReportAllocs()
	for b.Loop() {
		if showsNewFailure(o, n) {
			b.Fatal("a health flap shows no new failure")
		}
	}
}
