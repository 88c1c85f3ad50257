package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/ktesting"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/metrics"
)

// promotionObject is an auto-promotion to Stage stage in project shop, as
// Kargo leaves it: phase empty for one Kargo has not looked at yet.
func promotionObject(name, stage, phase string, created time.Time) *unstructured.Unstructured {
	md := map[string]any{"name": name, "namespace": "shop", "uid": name + "-uid", "creationTimestamp": created.UTC().Format(time.RFC3339),
		"labels": map[string]any{kargo.StageLabel: stage}}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kargo.GroupVersion.String(), "kind": "Promotion", "metadata": md,
		"spec": map[string]any{"stage": stage, "freight": "f", "steps": []any{map[string]any{"uses": "argocd-update"}}},
	}}
	if phase != "" {
		u.Object["status"] = map[string]any{"phase": phase, "message": "done"}
	}
	return u
}

// projectHistory is Stage prod with n finished Promotions and three
// unfinished ones (queued unseen, Pending, Running), all old, and Stage dev
// with one of each.
func projectHistory(n int) []*unstructured.Unstructured {
	old := time.Now().Add(-24 * time.Hour)
	objs := []*unstructured.Unstructured{healthyStage("prod", nil), healthyStage("dev", nil),
		promotionObject("dev.00000.done", "dev", "Succeeded", old),
		promotionObject("dev.00001.running", "dev", "Running", old)}
	finished := []string{"Succeeded", "Failed", "Errored", "Aborted"}
	for i := range n {
		objs = append(objs, promotionObject(fmt.Sprintf("prod.%05d.f", i), "prod", finished[i%len(finished)], old))
	}
	return append(objs,
		promotionObject("prod.90000.queued", "prod", "", old),
		promotionObject("prod.90001.pending", "prod", "Pending", old),
		promotionObject("prod.90002.running", "prod", "Running", old))
}

func cachedNames(c *Controller, stage string) []string {
	var names []string
	for _, p := range c.cachedPromotions(&kargo.Stage{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: stage}}) {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	return names
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	return scalarMetric(t, reg, name, func(m *dto.Metric) float64 { return m.GetGauge().GetValue() })
}

// TestOnlyUnfinishedPromotionsAreCached: of a project with 1,001 finished
// Promotions and 4 unfinished ones, the cache holds the 4, and says so; one
// that ends leaves it, and its Stage is synced again.
func TestOnlyUnfinishedPromotionsAreCached(t *testing.T) {
	f := newFixtureWith(t, false, nil, projectHistory(1000)...)
	waitUntil(t, f.c.HasSynced)
	unfinished := []string{"prod.90000.queued", "prod.90001.pending", "prod.90002.running"}
	if got := cachedNames(f.c, "prod"); !slices.Equal(got, unfinished) {
		t.Errorf("cached %v, want only the unfinished %v", got, unfinished)
	}
	if got := cachedNames(f.c, "dev"); !slices.Equal(got, []string{"dev.00001.running"}) {
		t.Errorf("cached for dev %v, want its unfinished one", got)
	}
	if got := gauge(t, f.reg, "kargo_latch_promotions_cached"); got != 4 {
		t.Errorf("kargo_latch_promotions_cached = %v, want 4", got)
	}

	// Kargo runs the Running one to its end: it leaves the cache, and its
	// Stage is synced once more.
	waitUntil(t, func() bool { return f.syncs() >= 1 })
	synced := f.syncs()
	promotions := f.client.Resource(kargo.PromotionsResource).Namespace("shop")
	u, err := promotions.Get(context.Background(), "prod.90002.running", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u.Object["status"] = map[string]any{"phase": "Succeeded"}
	if _, err := promotions.Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, func() bool { return len(cachedNames(f.c, "prod")) == 2 })
	waitUntil(t, func() bool { return f.syncs() > synced })
	if got := gauge(t, f.reg, "kargo_latch_promotions_cached"); got != 3 {
		t.Errorf("kargo_latch_promotions_cached = %v after one ended, want 3", got)
	}
}

// newFakeDynamic is a fake dynamic client as the fixture's, holding objs.
func newFakeDynamic(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		kargo.StagesResource:         "StageList",
		kargo.PromotionsResource:     "PromotionList",
		v1alpha1.StagePausesResource: "StagePauseList",
		kargo.FreightsResource:       "FreightList",
	}, objs...)
}

// TestPromotionCacheReadiness: the Promotion cache counts in the readiness
// as every cache does. A refused list keeps it unready with the reason, a
// refused watch after the list makes it unready with the reason, and both
// clear once the operator may list and watch again.
func TestPromotionCacheReadiness(t *testing.T) {
	var refuseList, refuseWatch atomic.Bool
	refuseList.Store(true)
	forbidden := func(verb string) error {
		return apierrors.NewForbidden(kargo.PromotionsResource.GroupResource(), "",
			fmt.Errorf(`User "system:serviceaccount:kargo-latch:x" cannot %s resource "promotions" in API group "kargo.akuity.io" at the cluster scope`, verb))
	}
	f := newFixtureWith(t, false, func(f *fixture) {
		f.client.PrependReactor("list", "promotions", func(k8stesting.Action) (bool, runtime.Object, error) {
			if refuseList.Load() {
				return true, nil, forbidden("list")
			}
			return false, nil, nil
		})
		f.client.PrependWatchReactor("promotions", func(k8stesting.Action) (bool, watch.Interface, error) {
			if refuseWatch.Load() {
				return true, nil, forbidden("watch")
			}
			return false, nil, nil
		})
	}, projectHistory(2)...)
	says := func(parts ...string) func() bool {
		return func() bool {
			err := f.c.Ready()
			if err == nil {
				return false
			}
			for _, p := range parts {
				if !strings.Contains(err.Error(), p) {
					return false
				}
			}
			return true
		}
	}
	// The Promotions sync in the background (see watchedCache): the
	// Stages and pauses are synced and the workers run, but the operator
	// is not ready while its Promotion list is refused.
	waitUntil(t, says("synced, but cannot list or watch", "may not list and watch promotions.kargo.akuity.io in all namespaces", `cannot list resource "promotions"`))
	if f.c.foregroundSyncedAt.Load() == nil {
		t.Error("Start waited for the Promotion cache, which syncs in the background")
	}

	refuseWatch.Store(true)
	refuseList.Store(false)
	waitUntil(t, says("synced, but cannot list or watch", `cannot watch resource "promotions"`))
	if got := len(cachedNames(f.c, "prod")); got != 3 {
		t.Errorf("%d cached from the list, want 3", got)
	}

	refuseWatch.Store(false)
	waitUntil(t, func() bool { return f.c.Ready() == nil })
}

// A Promotion list that keeps failing with an error nobody can diagnose (a
// 500 here) does not hold back the start, but makes the operator not ready
// once it has failed for CacheSyncTimeout after the other caches synced.
func TestStalledPromotionListIsNotReady(t *testing.T) {
	logger, ctx := ktesting.NewTestContext(t)
	c := withFailingPromotionList(t, 300*time.Millisecond)
	ctx, cancel := context.WithCancel(klog.NewContext(ctx, logger))
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatalf("Start waited for the Promotions' cache: %v", err)
	}
	waitUntil(t, func() bool {
		err := c.Ready()
		return err != nil && strings.Contains(err.Error(), "the Promotions' cannot list") && strings.Contains(err.Error(), "etcd is having a bad day")
	})
}

// A Promotion list that fails is not why the other caches are slow: while
// the Stages' first list is held past CacheSyncTimeout with no error,
// Start keeps waiting (and says so), and starts once they have synced,
// instead of giving up with the Promotions' problem.
func TestFailingPromotionListIsNotWhyTheStartIsSlow(t *testing.T) {
	logger := ktesting.NewLogger(t, ktesting.NewConfig(ktesting.BufferLogs(true)))
	logs := logger.GetSink().(ktesting.Underlier).GetBuffer()
	c := withFailingPromotionList(t, 50*time.Millisecond)
	// The hold is in the Stage informer's transform, which runs after the
	// fake client has answered (its reactors run under one lock, which
	// would hold the Promotions' list too): the Stages' cache syncs once
	// the Promotions' problem is known and a wait has timed out without a
	// problem of the Stages' own, or after 10 s (the test then fails).
	promotions := selectedCacheName(kargo.PromotionsResource, metav1.NamespaceAll, "")
	stages := c.stageInformers[metav1.NamespaceAll][0]
	if err := stages.SetTransform(func(obj any) (any, error) {
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if c.problems.of(promotions) != "" && strings.Contains(logs.String(), "Informer caches still syncing") {
				break
			}
		}
		return kargo.TransformStage(obj)
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logger))
	defer cancel()
	if err := c.Start(ctx); err != nil {
		t.Fatalf("Start gave up on slow Stages with the Promotions' problem: %v", err)
	}
	if !strings.Contains(logs.String(), "Informer caches still syncing") {
		t.Fatal("Start never waited on: the scenario did not happen")
	}
}

// withFailingPromotionList is a controller, not started, of a project whose
// Promotion list always fails with an error nobody can diagnose (a 500).
func withFailingPromotionList(t *testing.T, cacheSyncTimeout time.Duration) *Controller {
	t.Helper()
	client := newFakeDynamic(asObjects(projectHistory(2))...)
	client.PrependReactor("list", "promotions", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewInternalError(errors.New("etcd is having a bad day"))
	})
	c, err := New(Config{
		Dynamic: client, Kube: kubefake.NewClientset(), Recorder: record.NewFakeRecorder(100),
		Defaults:         latch.Settings{LatchDeadline: time.Minute, DegradedGrace: time.Minute},
		Metrics:          metrics.New(prometheus.NewRegistry(), "test"),
		CacheSyncTimeout: cacheSyncTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func asObjects(us []*unstructured.Unstructured) []runtime.Object {
	out := make([]runtime.Object, len(us))
	for i, u := range us {
		out[i] = u
	}
	return out
}
