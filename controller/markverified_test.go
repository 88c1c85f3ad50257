package controller

import (
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// markableStage is a healthy Stage with mark-verified on, whose current
// Freight collection holds the Freight f1.
func markableStage(name string) *unstructured.Unstructured {
	s := healthyStage(name, map[string]any{MarkVerifiedAnnotation: "true"})
	_ = unstructured.SetNestedSlice(s.Object, []any{map[string]any{
		"id":    "F1",
		"items": map[string]any{"Warehouse/w": map[string]any{"name": "f1", "origin": map[string]any{"kind": "Warehouse", "name": "w"}}},
	}}, "status", "freightHistory")
	return s
}

func TestMarkForbiddenWarnsAndLatchesAnyway(t *testing.T) {
	f := newFixtureWith(t, false, func(f *fixture) {
		f.client.PrependReactor("get", "freights", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewForbidden(kargo.FreightsResource.GroupResource(), "f1", nil)
		})
	}, markableStage("prod"))
	msg := f.waitEvent("Warning MarkVerifiedForbidden")
	if !strings.Contains(msg, "manifests/components/mark-verified") {
		t.Errorf("the Warning does not say how to fix it: %s", msg)
	}
	f.waitEvent("Normal HealthLatched")
	waitUntil(t, func() bool { r := f.record("prod"); return r.Phase == latch.PhaseLatched })
	if r := f.record("prod"); len(r.Marked) != 0 {
		t.Errorf("record says %v marked although marking was refused", r.Marked)
	}
}

func TestDryRunReportsTheMarkAndWritesNothing(t *testing.T) {
	f := newFixtureWith(t, true, nil, markableStage("prod"))
	msg := f.waitEvent("Normal FreightVerified")
	if !strings.Contains(msg, "Dry run: would mark Freight f1") {
		t.Errorf("dry-run Event: %s", msg)
	}
	for _, a := range f.client.Actions() {
		if a.GetVerb() != "get" && a.GetVerb() != "list" && a.GetVerb() != "watch" {
			t.Errorf("dry run wrote: %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
}

func waitUntil(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
