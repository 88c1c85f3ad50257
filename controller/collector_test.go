package controller

import (
	"context"
	"fmt"
	goruntime "runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/metrics"
)

// standby is a Controller that runs its informers but no workers, as a
// replica that does not hold the Lease: it never syncs a Stage.
type standby struct {
	t      *testing.T
	c      *Controller
	client *dynamicfake.FakeDynamicClient
	reg    *prometheus.Registry
}

func newStandby(t *testing.T, objects ...*unstructured.Unstructured) *standby {
	t.Helper()
	objs := make([]runtime.Object, len(objects))
	for i, o := range objects {
		objs[i] = o
	}
	s := &standby{t: t, reg: prometheus.NewRegistry()}
	s.client = dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		kargo.StagesResource:         "StageList",
		kargo.PromotionsResource:     "PromotionList",
		v1alpha1.StagePausesResource: "StagePauseList",
	}, objs...)
	c, err := New(Config{Dynamic: s.client, Kube: kubefake.NewClientset(), Recorder: record.NewFakeRecorder(100),
		Metrics: metrics.New(s.reg, "test")})
	if err != nil {
		t.Fatal(err)
	}
	s.c = c
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	if err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// series lists the per-Stage gauges as "stage_paused{stage,reason}" and
// "stage_phase{stage}=phase" (the phase whose series is 1), after checking
// that each Stage's phase series are one-hot over every phase.
func (s *standby) series() []string {
	s.t.Helper()
	mfs, err := s.reg.Gather()
	if err != nil {
		s.t.Fatal(err)
	}
	var out []string
	phases := map[string][]string{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			switch mf.GetName() {
			case "kargo_latch_stage_paused":
				out = append(out, fmt.Sprintf("paused{%s,%s}=%v", l["stage"], l["reason"], m.GetGauge().GetValue()))
			case "kargo_latch_stage_phase":
				phases[l["stage"]] = append(phases[l["stage"]], l["phase"])
				if m.GetGauge().GetValue() == 1 {
					out = append(out, fmt.Sprintf("phase{%s}=%s", l["stage"], l["phase"]))
				}
			}
		}
	}
	for stage, got := range phases {
		slices.Sort(got)
		want := slices.Sorted(slices.Values(phaseNames))
		if !slices.Equal(got, want) {
			s.t.Errorf("%s: phase series %v, want one per phase %v", stage, got, want)
		}
	}
	slices.Sort(out)
	return out
}

// waitSeries waits until the gauges show want.
func (s *standby) waitSeries(what string, want ...string) {
	s.t.Helper()
	slices.Sort(want)
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := s.series()
		if slices.Equal(got, want) {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: gauges differ (-want +got):\n%s", what, cmp.Diff(want, got))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// setRecord stores a record on a Stage, as the leader would.
func (s *standby) setRecord(stage string, r latch.Record) {
	s.t.Helper()
	stages := s.client.Resource(kargo.StagesResource).Namespace("shop")
	u, err := stages.Get(context.Background(), stage, metav1.GetOptions{})
	if err != nil {
		s.t.Fatal(err)
	}
	annotations := u.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations[api.StateAnnotation] = r.Encode()
	u.SetAnnotations(annotations)
	// The API server moves the resourceVersion on every write; the fake
	// does not.
	rv, err := strconv.Atoi(u.GetResourceVersion())
	if err != nil {
		s.t.Fatal(err)
	}
	u.SetResourceVersion(strconv.Itoa(rv + 1))
	if _, err := stages.Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		s.t.Fatal(err)
	}
}

// waitCached waits until the pause cache holds the named pauses (and no
// other): the standby has seen the input.
func (s *standby) waitCached(names ...string) {
	s.t.Helper()
	slices.Sort(names)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var got []string
		for _, p := range s.c.pausesIn("shop") {
			got = append(got, p.Name)
		}
		slices.Sort(got)
		if slices.Equal(got, names) {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("pause cache holds %v, want %v", got, names)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func stagePause(name, stage, reason string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "StagePause",
		"metadata": map[string]any{"name": name, "namespace": "shop", "resourceVersion": "1"},
		"spec":     map[string]any{"stage": stage, "reason": reason},
	}}
}

func latchedRecord(pauses ...string) latch.Record {
	at := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	return latch.Record{Phase: latch.PhaseLatched, Promotion: "p1", FreightID: "F1", ExaminedPromotion: "p1",
		PromotedAt: &at, LatchedAt: &at, Pauses: pauses}
}

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

func cacheKey(name string) cache.ObjectName { return cache.NewObjectName("shop", name) }

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
