package controller

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/clock"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/kargo"
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

// A Stage update that shows new trouble is synced before every Stage that
// only flaps: it may owe a pause. One that shows the same trouble again,
// or none, waits its turn.
func TestNewTroubleIsUrgent(t *testing.T) {
	stage := func(health, promotionPhase, verificationPhase string) *kargo.Stage {
		status := map[string]any{
			"health":        map[string]any{"status": health},
			"lastPromotion": map[string]any{"name": "p1", "status": map[string]any{"phase": promotionPhase}},
		}
		if verificationPhase != "" {
			status["freightHistory"] = []any{map[string]any{"id": "f1", "verificationHistory": []any{
				map[string]any{"id": "v1", "phase": verificationPhase},
			}}}
		}
		return kargo.StageFromUnstructured(&unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"name": "s", "namespace": "p", "resourceVersion": "1"},
			"status":   status,
		}})
	}
	fine := stage("Healthy", "Succeeded", "Successful")
	for name, tc := range map[string]struct {
		old, new *kargo.Stage
		urgent   bool
	}{
		"a flap to Progressing":           {fine, stage("Progressing", "Succeeded", "Successful"), false},
		"a flap back to Healthy":          {stage("Progressing", "Succeeded", ""), fine, false},
		"the Stage turned Unhealthy":      {fine, stage("Unhealthy", "Succeeded", "Successful"), true},
		"the Stage's health went Unknown": {fine, stage("Unknown", "Succeeded", "Successful"), true},
		"the promotion failed":            {stage("", "Running", ""), stage("", "Failed", ""), true},
		"the promotion errored":           {stage("", "Running", ""), stage("", "Errored", ""), true},
		"the verification failed":         {stage("Healthy", "Succeeded", "Running"), stage("Healthy", "Succeeded", "Failed"), true},
		"the verification was inconclusive": {
			stage("Healthy", "Succeeded", "Running"), stage("Healthy", "Succeeded", "Inconclusive"), true},
		"still Unhealthy":                {stage("Unhealthy", "Succeeded", ""), stage("Unhealthy", "Succeeded", ""), false},
		"the failure went away":          {stage("", "Failed", ""), fine, false},
		"a garbage health is not urgent": {fine, stage("Exploded", "Succeeded", "Successful"), false},
	} {
		if got := showsNewTrouble(tc.old, tc.new); got != tc.urgent {
			t.Errorf("%s: showsNewTrouble = %v, want %v", name, got, tc.urgent)
		}
	}
}

// The handler puts a Stage that shows new trouble ahead of those queued
// before it.
func TestTroubledStageGoesAheadOfTheQueue(t *testing.T) {
	stage := func(name, health string) *kargo.Stage {
		return kargo.StageFromUnstructured(&unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"name": name, "namespace": "p", "resourceVersion": health},
			"status":   map[string]any{"health": map[string]any{"status": health}},
		}})
	}
	c := &Controller{}
	stages, urgent := queue.NewWithLanes("", nil, clock.RealClock{})
	defer stages.ShutDown()
	c.work.Store(&workQueues{stages: stages, urgent: urgent})
	c.updateStage(stage("flapping", "Healthy"), stage("flapping", "Progressing"))
	c.updateStage(stage("failing", "Healthy"), stage("failing", "Unhealthy"))
	for _, want := range []string{"failing", "flapping"} {
		key, _ := stages.Get()
		if key.Name != want {
			t.Fatalf("handed out %v, want %s", key, want)
		}
		stages.Done(key)
	}
}
