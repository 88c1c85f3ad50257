package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestFamiliesIncludeVectorsWithoutSeries: the dashboard check trusts this
// list, so it must hold the families that have no series until an event
// (every vector), with their labels, and tell the histograms.
func TestFamiliesIncludeVectorsWithoutSeries(t *testing.T) {
	families, err := operatorFamilies()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]Family{}
	for _, f := range families {
		if _, dup := byName[f.Name]; dup {
			t.Errorf("%s is listed twice", f.Name)
		}
		byName[f.Name] = f
	}
	for _, want := range []Family{
		{Name: "kargo_latch_stage_paused", Type: "untyped", Labels: []string{"project", "stage", "reason"}},
		{Name: "kargo_latch_stage_phase", Type: "untyped", Labels: []string{"project", "stage", "phase"}},
		{Name: "kargo_latch_freight_verified_total", Type: "counter", Labels: []string{"project", "stage"}},
		{Name: "kargo_latch_reconcile_errors_total", Type: "counter", Labels: []string{}},
		{Name: "kargo_latch_cache_synced", Type: "gauge", Labels: []string{}},
		{Name: "kargo_latch_time_to_latch_seconds", Type: "histogram", Labels: []string{}},
		{Name: "kargo_latch_workqueue_depth", Type: "gauge", Labels: []string{"name"}},
		{Name: "kargo_latch_workqueue_work_duration_seconds", Type: "histogram", Labels: []string{"name"}},
	} {
		if diff := cmp.Diff(want, byName[want.Name]); diff != "" {
			t.Errorf("%s (-want +got):\n%s", want.Name, diff)
		}
	}
	if !slices.IsSortedFunc(families, func(a, b Family) int { return strings.Compare(a.Name, b.Name) }) {
		t.Error("families are not sorted by name")
	}
}
