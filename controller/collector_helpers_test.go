package controller

import (
	"context"
	"fmt"
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

func cacheKey(name string) cache.ObjectName { return cache.NewObjectName("shop", name) }
