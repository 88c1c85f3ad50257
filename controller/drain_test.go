package controller

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
)

// The drain runs beside the store of the record that pauses the Stage, not
// before it, so that its read and aborts do not hold back the paused label
// (what a failure's reaction time is measured to). Its live read is owed
// until one succeeds: here the Promotion cache never shows the queued
// auto-promotion (a stalled watch), and the first live read fails.
func TestLiveDrainIsRetriedUntilItSucceeds(t *testing.T) {
	var reads atomic.Int64
	f := newFixtureWith(t, false, func(f *fixture) {
		f.client.PrependReactor("list", "promotions", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.(k8stesting.ListAction).GetListRestrictions().Labels.Empty() {
				return true, emptyPromotionList(), nil // the cache's own list
			}
			if reads.Add(1) == 1 {
				return true, nil, apierrors.NewServiceUnavailable("promotions are down")
			}
			return false, nil, nil
		})
		f.client.PrependWatchReactor("promotions", func(k8stesting.Action) (bool, watch.Interface, error) {
			return true, watch.NewFake(), nil // and its watch delivers nothing
		})
	}, drainingStage(), queuedPromotion("prod.queued", nil), holdPause())
	waitUntil(t, func() bool { return slicesEqual(f.drained("hold"), "prod.queued") })
	if r := f.record("prod"); len(r.Pauses) != 1 {
		t.Errorf("record pauses %v, want hold", r.Pauses)
	}
	if n := reads.Load(); n < 2 {
		t.Errorf("%d live reads, want the failed one and its retry", n)
	}
	f.assertDrainedEvents(1)
}

// A drain that aborted a Promotion but could not record it (status.drained
// refused) records it on its retry even once Kargo has finished it
// (Aborted): the abort's mark says it was this drain's.
func TestDrainRecordsItsAbortAfterKargoFinishedIt(t *testing.T) {
	var refused atomic.Bool
	f := newFixtureWith(t, false, func(f *fixture) {
		f.client.PrependReactor("patch", "stagepauses", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if a.GetSubresource() != "status" || !strings.Contains(string(a.(k8stesting.PatchAction).GetPatch()), `"drained"`) || refused.Swap(true) {
				return false, nil, nil
			}
			// Kargo sees the abort request and finishes the Promotion
			// before the drain's record is written.
			obj, err := f.client.Tracker().Get(kargo.PromotionsResource, "shop", "prod.queued")
			if err != nil {
				return true, nil, err
			}
			u := obj.(*unstructured.Unstructured).DeepCopy()
			_ = unstructured.SetNestedField(u.Object, "Aborted", "status", "phase")
			if err := f.client.Tracker().Update(kargo.PromotionsResource, u, "shop"); err != nil {
				return true, nil, err
			}
			return true, nil, apierrors.NewServiceUnavailable("status writes are down")
		})
	}, drainingStage(), queuedPromotion("prod.queued", nil), holdPause())
	waitUntil(t, func() bool { return slicesEqual(f.drained("hold"), "prod.queued") })
	f.assertDrainedEvents(1)
}

// A Promotion someone else asked to abort (a person, in Kargo's UI) is not
// this drain's: it is neither aborted again nor recorded as drained.
func TestDrainLeavesAnotherAbortAlone(t *testing.T) {
	var reads atomic.Int64
	f := newFixtureWith(t, false, func(f *fixture) {
		f.client.PrependReactor("list", "promotions", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if !a.(k8stesting.ListAction).GetListRestrictions().Labels.Empty() {
				reads.Add(1)
			}
			return false, nil, nil
		})
	}, drainingStage(), queuedPromotion("prod.queued", map[string]any{kargo.AbortAnnotation: `{"action":"terminate","actor":"kubernetes:ops"}`}), holdPause())
	// The pause took effect and its drain read the Stage's Promotions; the
	// sync that drained has returned once the record is stored and read.
	waitUntil(t, func() bool { return reads.Load() > 0 && len(f.record("prod").Pauses) == 1 })
	synced := f.syncs()
	f.touchProd()
	waitUntil(t, func() bool { return f.syncs() > synced })
	if got := f.drained("hold"); len(got) != 0 {
		t.Errorf("status.drained %v, want none: the abort was a person's", got)
	}
	for _, a := range f.client.Actions() {
		if a.GetVerb() == "patch" && a.GetResource().Resource == "promotions" {
			t.Errorf("the drain patched a Promotion a person had asked to abort: %s", a.(k8stesting.PatchAction).GetPatch())
		}
	}
	f.assertDrainedEvents(0)
}

// drainingStage is the latched, healthy Stage prod with the drain on.
func drainingStage() *unstructured.Unstructured {
	return healthyStage("prod", map[string]any{api.DrainOnPauseAnnotation: "true"})
}

// holdPause is a person's pause of prod.
func holdPause() *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "StagePause",
		"metadata": map[string]any{"name": "hold", "namespace": "shop", "uid": "hold-uid", "resourceVersion": "1"},
		"spec":     map[string]any{"stage": "prod", "reason": "Manual"},
	}}
}

// queuedPromotion is a Pending auto-promotion of prod, as Kargo's webhook
// leaves it, with extra annotations.
func queuedPromotion(name string, annotations map[string]any) *unstructured.Unstructured {
	md := map[string]any{"name": name, "namespace": "shop", "resourceVersion": "1", "labels": map[string]any{kargo.StageLabel: "prod"}}
	if annotations != nil {
		md["annotations"] = annotations
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kargo.akuity.io/v1alpha1", "kind": "Promotion", "metadata": md,
		"spec":   map[string]any{"stage": "prod", "freight": "f2"},
		"status": map[string]any{"phase": "Pending"},
	}}
}

func emptyPromotionList() *unstructured.UnstructuredList {
	return &unstructured.UnstructuredList{Object: map[string]any{
		"apiVersion": "kargo.akuity.io/v1alpha1", "kind": "PromotionList", "metadata": map[string]any{"resourceVersion": "1"},
	}}
}

// drained reads a pause's status.drained from the server.
func (f *fixture) drained(pause string) []string {
	u, err := f.client.Resource(v1alpha1.StagePausesResource).Namespace("shop").Get(context.Background(), pause, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	got, _, _ := unstructured.NestedStringSlice(u.Object, "status", "drained")
	return got
}

// assertDrainedEvents checks how many PromotionDrained Events were sent.
func (f *fixture) assertDrainedEvents(want int) {
	f.t.Helper()
	n := 0
	for {
		select {
		case e := <-f.recorder.Events:
			if strings.HasPrefix(e, "Normal "+api.ReasonPromotionDrained) {
				n++
			}
			continue
		default:
		}
		break
	}
	if n != want {
		f.t.Errorf("%d PromotionDrained Events, want %d", n, want)
	}
}

func slicesEqual(got []string, want ...string) bool {
	return strings.Join(got, ",") == strings.Join(want, ",")
}
