package controller

import (
	"context"
	"fmt"
	goruntime "runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/metrics"
)

// Walks decode a record only when it changed: at 10,000 busy Stages the
// status moves between scrapes while records mostly do not.
func TestWalksDecodeOnlyChangedRecords(t *testing.T) {
	const stages = 1000
	objs := make([]*unstructured.Unstructured, stages)
	for i := range objs {
		objs[i] = healthyStage(fmt.Sprintf("s%04d", i), map[string]any{api.StateAnnotation: latchedRecord("hold").Encode()})
	}
	s := newStandby(t, append(objs, stagePause("hold", "*", "Manual"))...)
	states := newStageStates(s.c)
	walk := func() (n int) {
		for st := range states.all {
			if st.Paused && st.Phase == string(latch.PhaseLatched) {
				n++
			}
		}
		return n
	}
	if n := walk(); n != stages {
		t.Fatalf("the first walk saw %d paused, Latched Stages, want %d", n, stages)
	}
	// Without the cache, each walk decodes 1000 records: tens of thousands
	// of allocations.
	if allocs := allocsOf(walk); allocs > 50 {
		t.Errorf("a walk over unchanged records allocates %v times, want a few (no decoding)", allocs)
	}
	// Kargo writes Stages' status: new resourceVersions, same records (50
	// Stages: the fake's watch holds 100 events).
	stageClient := s.client.Resource(kargo.StagesResource).Namespace("shop")
	const written = 50
	for i := range written {
		u, err := stageClient.Get(context.Background(), fmt.Sprintf("s%04d", i), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		u.SetResourceVersion("2")
		if err := unstructured.SetNestedField(u.Object, "Progressing", "status", "health", "status"); err != nil {
			t.Fatal(err)
		}
		if _, err := stageClient.Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	seen := func() (n int) {
		for _, st := range s.c.stagesIn("shop") {
			if st.ResourceVersion == "2" {
				n++
			}
		}
		return n
	}
	for seen() != written {
		if time.Now().After(deadline) {
			t.Fatal("the cache did not see Kargo's status writes")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if allocs := allocsOf(walk); allocs > 50 {
		t.Errorf("a walk after status writes that left the records alone allocates %v times, want a few (no decoding)", allocs)
	}

	// A changed record is decoded again, and a deleted Stage is forgotten.
	s.setRecord("s0000", latch.Record{Phase: latch.PhaseIdle})
	if err := s.client.Resource(kargo.StagesResource).Namespace("shop").Delete(context.Background(), "s0001", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for walk() != stages-2 {
		if time.Now().After(deadline) {
			t.Fatal("the walk did not see s0000's new record and s0001's deletion")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := states.records[cacheKey("s0000")].phase; got != string(latch.PhaseIdle) {
		t.Errorf("s0000's cached phase %q after its record changed, want Idle", got)
	}
	if _, kept := states.records[cacheKey("s0001")]; kept || len(states.records) != stages-1 {
		t.Errorf("%d cached records (s0001 kept: %v), want %d: a deleted Stage's entry must go", len(states.records), kept, stages-1)
	}
}

// allocsOf counts the allocations of one call of f.
func allocsOf(f func() int) uint64 {
	var before, after goruntime.MemStats
	goruntime.ReadMemStats(&before)
	f()
	goruntime.ReadMemStats(&after)
	return after.Mallocs - before.Mallocs
}

// BenchmarkScrape10000Stages measures one scrape of the per-Stage gauges
// over 10,000 cached Stages with busy-Stage records (40 Apps each), once
// their records are cached, and the memory the record cache keeps.
func BenchmarkScrape10000Stages(b *testing.B) {
	const stages = 10000
	rec := latchedRecord()
	rec.AppsHealthy = map[string]time.Time{}
	for i := range 40 {
		rec.AppsHealthy[fmt.Sprintf("argocd/app-%02d", i)] = *rec.LatchedAt
	}
	objs := make([]runtime.Object, stages)
	for i := range objs {
		objs[i] = healthyStage(fmt.Sprintf("s%05d", i), map[string]any{api.StateAnnotation: rec.Encode()})
	}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		kargo.StagesResource: "StageList", kargo.PromotionsResource: "PromotionList", v1alpha1.StagePausesResource: "StagePauseList",
	}, objs...)
	reg := prometheus.NewRegistry()
	c, err := New(Config{Dynamic: client, Kube: kubefake.NewClientset(), Recorder: record.NewFakeRecorder(1), Metrics: metrics.New(reg, "bench")})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := c.Start(ctx); err != nil {
		b.Fatal(err)
	}
	var before, after goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&before)
	states := newStageStates(c)
	first := time.Now()
	for range states.all {
	}
	firstWalk := time.Since(first)
	goruntime.GC()
	goruntime.ReadMemStats(&after)
	cachePerStage := float64(after.HeapAlloc-before.HeapAlloc) / stages
	goruntime.KeepAlive(states)
	if _, err := reg.Gather(); err != nil { // fills the registered walk's cache
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := reg.Gather(); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(firstWalk.Milliseconds()), "first-walk-ms")
	b.ReportMetric(cachePerStage, "cache-B/stage")
}
