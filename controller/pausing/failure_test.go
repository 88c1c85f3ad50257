package pausing

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/controller/report"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/metrics"
)

// someonesPause is a StagePause a person made at name: covering stage,
// and, when looksOwned, with the ownerReference and finalizer of an
// operator-made pause, but for another Stage UID.
func someonesPause(name, stage string, looksOwned bool) *unstructured.Unstructured {
	p := &v1alpha1.StagePause{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "StagePause"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", UID: types.UID("uid-" + name)},
		Spec:       v1alpha1.StagePauseSpec{Stage: stage, Reason: "Manual"},
	}
	if looksOwned {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: kargo.GroupVersion.String(), Kind: "Stage", Name: stage, UID: "an-older-prod"}}
		p.Finalizers = []string{v1alpha1.ResumeFinalizer}
	}
	obj, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	return &unstructured.Unstructured{Object: obj}
}

// TestFailurePauseIsNeverAnotherObject: objects at the derived name and
// its alternates that are not this failure's pause (another Stage's, a
// pause of prod that a person made, one owned by an earlier Stage of the
// same name) are reported and passed over; the pause is made at the next
// deterministic name, and made again it is found there, or in the cache by
// its annotation, never made twice.
func TestFailurePauseIsNeverAnotherObject(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	const derived = "prod-promotionfailed-1"
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		v1alpha1.StagePausesResource: "StagePauseList",
	}, someonesPause(derived, "nowhere", false), someonesPause(derived+"-2", "prod", false), someonesPause(derived+"-3", "prod", true))
	m := metrics.New(prometheus.NewRegistry(), "test")
	kube := kubefake.NewClientset()
	f := &Failures{Dynamic: client, Report: report.New(kube, record.NewFakeRecorder(10), clocktesting.NewFakeClock(time.Now())), NameTaken: m.PauseNameTaken}
	st := &kargo.Stage{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "prod", UID: "stage-uid"}}
	create := []latch.Action{{Kind: latch.ActionCreatePause, Pause: derived, Reason: latch.ReasonPromotionFailed, Message: "p1 failed"}}

	covering, held, madeAs, err := f.Create(ctx, st, create, nil, nil)
	if err != nil || len(covering) != 1 || len(held) != 0 {
		t.Fatalf("covering %v, held %v, %v; want the new pause covering", covering, held, err)
	}
	p := covering[0]
	if want := derived + "-4"; p.Name != want || !IsFailurePauseOf(p, st) || p.Annotations[v1alpha1.DerivedNameAnnotation] != derived {
		t.Errorf("pause %s (annotations %v), want %s: this failure's own, tied to its derived name", p.Name, p.Annotations, want)
	}
	if diff := cmp.Diff(map[string]string{derived: derived + "-4"}, madeAs); diff != "" {
		t.Errorf("madeAs (-want +got):\n%s", diff)
	}
	if got := counterValue(t, m.PauseNameTaken.WithLabelValues("shop", "prod")); got != 3 {
		t.Errorf("pause_name_taken_total = %v, want 3", got)
	}
	events, _ := kube.CoreV1().Events("shop").List(context.Background(), metav1.ListOptions{})
	if len(events.Items) != 3 {
		t.Fatalf("%d Events, want a PauseNameTaken per object", len(events.Items))
	}
	for _, ev := range events.Items {
		if ev.Reason != api.ReasonPauseNameTaken || ev.Type != "Warning" {
			t.Errorf("Event %s %s, want Warning PauseNameTaken", ev.Type, ev.Reason)
		}
	}

	// Judged again with a cache that lags (a store that failed): found at
	// its name, nothing made, each object reported once only.
	again, _, madeAs, err := f.Create(ctx, st, create, nil, nil)
	if err != nil || len(again) != 1 || again[0].Name != p.Name || madeAs[derived] != p.Name {
		t.Errorf("judged again: %v, %v, %v; want %s found", again, madeAs, err, p.Name)
	}
	if got := counterValue(t, m.PauseNameTaken.WithLabelValues("shop", "prod")); got != 3 {
		t.Errorf("pause_name_taken_total = %v after a second try, want 3 (once per object)", got)
	}
	// Judged again from a cache that holds it (after a restart): found by
	// its annotation, with no request at all.
	before := len(client.Actions())
	again, _, madeAs, err = f.Create(ctx, st, create, []*v1alpha1.StagePause{p}, nil)
	if err != nil || len(again) != 1 || madeAs[derived] != p.Name || len(client.Actions()) != before {
		t.Errorf("from the cache: %v, %v, %v, %d requests; want %s found without one", again, madeAs, err, len(client.Actions())-before, p.Name)
	}
}

// TestGeneratedPauseIsFoundAgain: where the derived name and every
// alternate are taken, the pause gets a generated name, which cannot be
// found again by name. Judged again before the cache shows it (a store
// that failed, a crash right after the create), it is found live by its
// annotation: no second pause.
func TestGeneratedPauseIsFoundAgain(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	const derived = "prod-promotionfailed-1"
	st := &kargo.Stage{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "prod", UID: "stage-uid"}}
	generated := someonesPause(derived+"-x7k2q", "prod", false)
	generated.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: kargo.GroupVersion.String(), Kind: "Stage", Name: "prod", UID: st.UID}})
	generated.SetFinalizers([]string{v1alpha1.ResumeFinalizer})
	generated.SetAnnotations(map[string]string{v1alpha1.DerivedNameAnnotation: derived})
	objs := []runtime.Object{generated}
	for attempt := 1; attempt <= alternateNames+1; attempt++ {
		objs = append(objs, someonesPause(alternateName(derived, attempt), "nowhere", false))
	}
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		v1alpha1.StagePausesResource: "StagePauseList",
	}, objs...)
	m := metrics.New(prometheus.NewRegistry(), "test")
	f := &Failures{Dynamic: client, Report: report.New(kubefake.NewClientset(), record.NewFakeRecorder(10), clocktesting.NewFakeClock(time.Now())), NameTaken: m.PauseNameTaken}
	create := []latch.Action{{Kind: latch.ActionCreatePause, Pause: derived, Reason: latch.ReasonPromotionFailed, Message: "p1 failed"}}

	covering, _, madeAs, err := f.Create(ctx, st, create, nil, nil)
	if err != nil || len(covering) != 1 || covering[0].Name != generated.GetName() || madeAs[derived] != generated.GetName() {
		t.Fatalf("covering %v, madeAs %v, %v; want the generated pause %s found", covering, madeAs, err, generated.GetName())
	}
	for _, a := range client.Actions() {
		if a.GetVerb() == "create" {
			if c, ok := a.(interface{ GetObject() runtime.Object }); ok {
				if u, ok := c.GetObject().(*unstructured.Unstructured); ok && u.GetGenerateName() != "" {
					t.Errorf("a second pause was made with generateName %s", u.GetGenerateName())
				}
			}
		}
	}
}

func TestAlternateNamesFitAName(t *testing.T) {
	long := make([]byte, 253)
	for i := range long {
		long[i] = 'a'
	}
	for attempt := 1; attempt <= alternateNames+1; attempt++ {
		if n := alternateName(string(long), attempt); len(n) > 253 {
			t.Errorf("attempt %d: %d characters", attempt, len(n))
		}
	}
	if got := alternateName("prod-degraded-0a1b2c3d", 2); got != "prod-degraded-0a1b2c3d-2" {
		t.Errorf("alternateName = %q", got)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	m := &dto.Metric{}
	if err := c.Write(m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
