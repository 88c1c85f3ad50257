package controller

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/kargo"
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
