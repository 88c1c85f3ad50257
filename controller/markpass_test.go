package controller

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// markableStage is a healthy Stage with mark-verified on, whose current
// Freight collection holds the Freight f1.
func markableStage(name string) *unstructured.Unstructured {
	s := healthyStage(name, map[string]any{api.MarkVerifiedAnnotation: "true"})
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
	}, markableStage("qa"))
	// The latch is stored before the mark is tried.
	f.waitEvent("Normal HealthLatched")
	msg := f.waitEvent("Warning MarkVerifiedForbidden")
	if !strings.Contains(msg, "manifests/components/mark-verified") {
		t.Errorf("the Warning does not say how to fix it: %s", msg)
	}
	waitUntil(t, func() bool { r := f.record("qa"); return r.Phase == latch.PhaseLatched })
	if r := f.record("qa"); len(r.Marked) != 0 {
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

// freightF1 is markableStage's Freight f1, verified upstream in Stage qa.
func freightF1() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kargo.akuity.io/v1alpha1", "kind": "Freight",
		"metadata": map[string]any{"name": "f1", "namespace": "shop", "resourceVersion": "1"},
		"origin":   map[string]any{"kind": "Warehouse", "name": "w"},
		"status":   map[string]any{"verifiedIn": map[string]any{"qa": map[string]any{"verifiedAt": "2026-11-29T09:00:00Z"}}},
	}}
}

// freightVerifiedEvents counts the FreightVerified Events written directly.
func (f *fixture) freightVerifiedEvents() int {
	evs, err := f.kube.CoreV1().Events("shop").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	n := 0
	for _, e := range evs.Items {
		if e.Reason == api.ReasonFreightVerified {
			n++
		}
	}
	return n
}

func (f *fixture) verifiedAt(freight, stage string) string {
	u, err := f.client.Resource(kargo.FreightsResource).Namespace("shop").Get(context.Background(), freight, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	at, _, _ := unstructured.NestedString(u.Object, "status", "verifiedIn", stage, "verifiedAt")
	return at
}

// A crash between the Freight patch and the store of the record (here: the
// store fails once) leaves one mark at the stored latchedAt and one Event.
func TestMarkSurvivesAFailedStoreAfterThePatch(t *testing.T) {
	var stagePatches, freightPatches atomic.Int64
	f := newFixtureWith(t, false, func(f *fixture) {
		f.client.PrependReactor("patch", "freights", func(k8stesting.Action) (bool, runtime.Object, error) {
			freightPatches.Add(1)
			return false, nil, nil
		})
		f.client.PrependReactor("patch", "stages", func(k8stesting.Action) (bool, runtime.Object, error) {
			if stagePatches.Add(1) == 2 { // the store after the first mark
				return true, nil, apierrors.NewServiceUnavailable("etcd is down")
			}
			return false, nil, nil
		})
	}, markableStage("prod"), freightF1())
	waitUntil(t, func() bool { return len(f.record("prod").Marked) == 1 })
	r := f.record("prod")
	if got, want := f.verifiedAt("f1", "prod"), r.LatchedAt.UTC().Format(time.RFC3339); got != want {
		t.Errorf("verifiedAt %s, want the stored latchedAt %s", got, want)
	}
	if got := f.verifiedAt("f1", "qa"); got != "2026-11-29T09:00:00Z" {
		t.Errorf("another Stage's verifiedIn changed to %q", got)
	}
	if n := freightPatches.Load(); n != 1 {
		t.Errorf("%d Freight patches, want 1", n)
	}
	if n := f.freightVerifiedEvents(); n != 1 {
		t.Errorf("%d FreightVerified Events, want 1", n)
	}
}

// A Freight patch that fails leaves no Event behind, holds back only the
// mark (the latch is stored), and is tried again (after markErrorRetryFirst;
// a conflict is retried at once: TestMarkConflictIsARetryNotAnError).
func TestMarkRetriesAFailedPatchWithoutAnOrphanEvent(t *testing.T) {
	var freightPatches atomic.Int64
	f := newFixtureWith(t, false, func(f *fixture) {
		f.client.PrependReactor("patch", "freights", func(k8stesting.Action) (bool, runtime.Object, error) {
			if freightPatches.Add(1) == 1 {
				return true, nil, apierrors.NewServiceUnavailable("etcd is down")
			}
			return false, nil, nil
		})
	}, markableStage("prod"), freightF1())
	f.waitEvent("Normal HealthLatched")
	waitUntil(t, func() bool { return freightPatches.Load() >= 1 })
	if r := f.record("prod"); r.Phase != latch.PhaseLatched || len(r.Marked) != 0 {
		t.Fatalf("after the failed patch: phase %s, marked %v; want Latched, none", r.Phase, r.Marked)
	}
	if n := f.freightVerifiedEvents(); n != 0 {
		t.Fatalf("%d FreightVerified Events before any mark", n)
	}
	waitUntil(t, func() bool { return len(f.record("prod").Marked) == 1 })
	if n := f.freightVerifiedEvents(); n != 1 {
		t.Errorf("%d FreightVerified Events, want 1", n)
	}
}

// A sync whose cache does not show the marks this replica stored yet (the
// echo of its own write is late; here it never comes) does not read the
// Freight and the pauses again: one mark costs one Freight GET.
func TestMarkReadsTheFreightOnce(t *testing.T) {
	var freightGets atomic.Int64
	f := newFixtureWith(t, false, func(f *fixture) {
		f.client.PrependReactor("get", "freights", func(k8stesting.Action) (bool, runtime.Object, error) {
			freightGets.Add(1)
			return false, nil, nil
		})
		// The store of the marks succeeds, but its echo never reaches the
		// cache: the object is left as it was.
		f.client.PrependReactor("patch", "stages", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if !strings.Contains(string(a.(k8stesting.PatchAction).GetPatch()), `\"marked\"`) {
				return false, nil, nil
			}
			obj, err := f.client.Tracker().Get(kargo.StagesResource, "shop", "prod")
			return true, obj, err
		})
	}, markableStage("prod"), freightF1())
	waitUntil(t, func() bool { return f.freightVerifiedEvents() == 1 })
	// Kargo rewrites the Stage's health: the operator syncs it again on a
	// cache that still shows the latch without its marks.
	syncs := f.syncs()
	u, err := f.client.Resource(kargo.StagesResource).Namespace("shop").Get(context.Background(), "prod", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_ = unstructured.SetNestedField(u.Object, "Progressing", "status", "health", "status")
	if _, err := f.client.Resource(kargo.StagesResource).Namespace("shop").Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return f.syncs() > syncs })
	if n := freightGets.Load(); n != 1 {
		t.Errorf("%d Freight GETs for one mark, want 1", n)
	}
}

// latchedProd is markableStage's Stage prod with its cycle latched, by the
// Stage's health, at 10:01:00, and not yet marked.
func latchedProd() *unstructured.Unstructured {
	latchedAt := time.Date(2026, 11, 29, 10, 1, 0, 0, time.UTC)
	rec := latch.Record{Phase: latch.PhaseLatched, Promotion: "p1", FreightID: "F1", ExaminedPromotion: "p1", LatchedBy: latch.LatchedByStage,
		PromotedAt: ptrTime(latchedAt.Add(-time.Minute)), LatchedAt: &latchedAt}
	s := markableStage("prod")
	annotations := s.GetAnnotations()
	annotations[api.StateAnnotation] = rec.Encode()
	s.SetAnnotations(annotations)
	return s
}

// freightVerifiedBy is Freight f1 verified in Stage prod at 10:01:00, the
// second latchedProd latched in, with the managedFields entry the API
// server records for that write by manager.
func freightVerifiedBy(manager string) *unstructured.Unstructured {
	f := freightF1()
	_ = unstructured.SetNestedField(f.Object, "2026-11-29T10:01:00Z", "status", "verifiedIn", "prod", "verifiedAt")
	f.SetManagedFields([]metav1.ManagedFieldsEntry{{
		Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "kargo.akuity.io/v1alpha1",
		Subresource: "status", FieldsType: "FieldsV1",
		FieldsV1: metav1.NewFieldsV1(`{"f:status":{"f:verifiedIn":{"f:prod":{".":{},"f:verifiedAt":{}}}}}`),
	}})
	return f
}

// A Freight Kargo verified in the very second the cycle latched carries the
// verifiedAt kargo-latch would write: it is Kargo's mark all the same (the
// API server says who wrote it), so no write, no Event, no count.
func TestMarkLeavesKargosMarkOfTheSameSecond(t *testing.T) {
	var freightPatches atomic.Int64
	f := newFixtureWith(t, false, func(f *fixture) {
		f.client.PrependReactor("patch", "freights", func(k8stesting.Action) (bool, runtime.Object, error) {
			freightPatches.Add(1)
			return false, nil, nil
		})
	}, latchedProd(), freightVerifiedBy("kargo-controller"))
	waitUntil(t, func() bool { return len(f.record("prod").Marked) == 1 })
	f.idle()
	if n := f.freightVerifiedEvents(); n != 0 {
		t.Errorf("%d FreightVerified Events for Kargo's own mark, want none", n)
	}
	if n := freightPatches.Load(); n != 0 {
		t.Errorf("%d Freight patches, want none", n)
	}
	if n := f.counterSum("kargo_latch_freight_verified_total", nil); n != 0 {
		t.Errorf("kargo_latch_freight_verified_total = %v, want 0", n)
	}
}

// A try cut short after its patch (a crash before the Event) finds the
// Freight verified at latchedAt by kargo-latch itself, and makes the Event.
func TestMarkFoundAfterACrashGetsItsEvent(t *testing.T) {
	f := newFixture(t, false, latchedProd(), freightVerifiedBy(api.FieldManager))
	waitUntil(t, func() bool { return len(f.record("prod").Marked) == 1 })
	f.idle()
	if n := f.freightVerifiedEvents(); n != 1 {
		t.Errorf("%d FreightVerified Events for the mark of a try cut short, want 1", n)
	}
}

// Kargo writing the Freight between the operator's read and its patch
// makes the patch conflict: a retry from fresh reads, counted as a
// conflict, never logged as an error.
func TestMarkConflictIsARetryNotAnError(t *testing.T) {
	var freightPatches atomic.Int64
	f, log := newLoggedFixture(t, func(f *fixture) {
		f.client.PrependReactor("patch", "freights", func(k8stesting.Action) (bool, runtime.Object, error) {
			if freightPatches.Add(1) == 1 {
				return true, nil, apierrors.NewConflict(kargo.FreightsResource.GroupResource(), "f1",
					errors.New("the object has been modified; please apply your changes to the latest version and try again"))
			}
			return false, nil, nil
		})
	}, markableStage("prod"), freightF1())
	waitUntil(t, func() bool { return len(f.record("prod").Marked) == 1 })
	f.idle()
	if n := freightPatches.Load(); n != 2 {
		t.Errorf("%d Freight patches, want 2: the conflict and its retry", n)
	}
	if n := f.freightVerifiedEvents(); n != 1 {
		t.Errorf("%d FreightVerified Events, want 1", n)
	}
	if got := unlabeledCounter(t, f.reg, "kargo_latch_write_conflicts_total"); got != 1 {
		t.Errorf("kargo_latch_write_conflicts_total = %v, want 1", got)
	}
	if got := unlabeledCounter(t, f.reg, "kargo_latch_reconcile_errors_total"); got != 0 {
		t.Errorf("kargo_latch_reconcile_errors_total = %v, want 0: a conflict is a retry", got)
	}
	for _, e := range log.Data() {
		if e.Type == ktesting.LogError {
			t.Errorf("logged an error for a conflict: %s %v", e.Message, e.Err)
		}
	}
}
