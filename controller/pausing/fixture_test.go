package pausing

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/controller/report"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/metrics"
)

// writerFixture is a StatusWriter over a fake API server, with the cache
// it reads set by the test: cached pauses and Stages, one term, a fake
// clock.
type writerFixture struct {
	t        *testing.T
	client   *dynamicfake.FakeDynamicClient
	recorder *record.FakeRecorder
	metrics  *metrics.Recorder
	clock    *clocktesting.FakeClock
	pauses   map[cache.ObjectName]*v1alpha1.StagePause
	stages   []*kargo.Stage
	term     *int
	w        *StatusWriter
}

// newWriterFixture makes the fixture of the operator counting under key;
// objects are on the API server.
func newWriterFixture(t *testing.T, key string, objects ...runtime.Object) *writerFixture {
	f := &writerFixture{
		t: t,
		client: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
			kargo.StagesResource:         "StageList",
			v1alpha1.StagePausesResource: "StagePauseList",
		}, objects...),
		recorder: record.NewFakeRecorder(10),
		metrics:  metrics.New(prometheus.NewRegistry(), "test"),
		clock:    clocktesting.NewFakeClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)),
		pauses:   map[cache.ObjectName]*v1alpha1.StagePause{},
		term:     new(int),
	}
	stages := func(string) []*kargo.Stage { return f.stages }
	f.w = &StatusWriter{
		Pause: func(key cache.ObjectName) (*v1alpha1.StagePause, bool, error) {
			p, ok := f.pauses[key]
			return p, ok, nil
		},
		Stages:   stages,
		Term:     func() any { return f.term },
		Dynamic:  f.client,
		Releaser: &Releaser{Dynamic: f.client, Stages: stages, Sharded: key != UnshardedKey},
		Report:   report.New(kubefake.NewClientset(), f.recorder, f.clock),
		Metrics:  f.metrics,
		Clock:    f.clock,
		Key:      key,
	}
	return f
}

// sync runs the writer's Sync of the pause name.
func (f *writerFixture) sync(name string) time.Duration {
	f.t.Helper()
	_, ctx := ktesting.NewTestContext(f.t)
	held, err := f.w.Sync(ctx, cache.NewObjectName("shop", name))
	if err != nil {
		f.t.Fatal(err)
	}
	return held
}

// patches returns the bodies of the patches of StagePauses' subresource
// (status, or "" for the object).
func (f *writerFixture) patches(subresource string) []map[string]any {
	f.t.Helper()
	var out []map[string]any
	for _, a := range f.client.Actions() {
		p, ok := a.(k8stesting.PatchAction)
		if !ok || p.GetResource() != v1alpha1.StagePausesResource || p.GetSubresource() != subresource {
			continue
		}
		var body map[string]any
		if err := json.Unmarshal(p.GetPatch(), &body); err != nil {
			f.t.Fatal(err)
		}
		out = append(out, body)
	}
	return out
}

// serverPause reads a StagePause from the API server.
func (f *writerFixture) serverPause(name string) *v1alpha1.StagePause {
	f.t.Helper()
	u, err := f.client.Resource(v1alpha1.StagePausesResource).Namespace("shop").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return typedPause(f.t, u)
}

// contested is kargo_latch_pause_status_contested_total of project shop.
func (f *writerFixture) contested() float64 {
	f.t.Helper()
	m := &dto.Metric{}
	if err := f.metrics.PauseStatusContested.WithLabelValues("shop").Write(m); err != nil {
		f.t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// pauseObject is a StagePause of project shop on the API server, made at
// a fixed time, of the Stage named (or every Stage: "*").
func pauseObject(name, stage string) *unstructured.Unstructured {
	p := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "StagePause",
		"metadata": map[string]any{"name": name, "namespace": "shop", "resourceVersion": "1", "uid": "uid-" + name},
		"spec":     map[string]any{"stage": stage, "reason": v1alpha1.ReasonManual},
	}}
	p.SetCreationTimestamp(metav1.NewTime(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)))
	return p
}

// typedPause is the StagePause as a cache holds it.
func typedPause(t *testing.T, u *unstructured.Unstructured) *v1alpha1.StagePause {
	t.Helper()
	p := &v1alpha1.StagePause{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// stage is a cached Stage of project shop.
func stage(name string) *kargo.Stage {
	return &kargo.Stage{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", UID: types.UID("uid-" + name)}}
}
