package controller

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/controller/gatebypass"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/metrics"
)

func bypassObjects(now time.Time) []*unstructured.Unstructured {
	ts := func(d time.Duration) string { return now.Add(d).UTC().Format(time.RFC3339) }
	stage := healthyStage("prod", nil)
	stage.Object["metadata"].(map[string]any)["uid"] = "stage-uid"
	pauseObj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "StagePause",
		"metadata": map[string]any{"name": "hold", "namespace": "shop", "creationTimestamp": ts(-time.Minute)},
		"spec":     map[string]any{"stage": "prod", "reason": "Manual"},
	}}
	promo := func(name, actor string, created time.Duration) *unstructured.Unstructured {
		md := map[string]any{"name": name, "namespace": "shop", "uid": name + "-uid", "creationTimestamp": ts(created)}
		switch {
		case actor != "":
			md["annotations"] = map[string]any{kargo.CreateActorAnnotation: actor}
		case name == "bypass":
			// Stamped by the API server (kargo-latch-requested-by).
			md["annotations"] = map[string]any{api.RequestedByAnnotation: "kargo-shard-eu"}
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": kargo.GroupVersion.String(), "kind": "Promotion", "metadata": md,
			"spec": map[string]any{"stage": "prod", "freight": "f"},
		}}
	}
	return []*unstructured.Unstructured{stage, pauseObj,
		promo("bypass", "", -10*time.Second),                        // an auto-promotion admitted under the pause
		promo("person", "kubernetes:dev", -10*time.Second),          // a hotfix: the gate lets people pass
		promo("queued", "", -2*time.Minute),                         // created before the pause
		promo("old", "", -gatebypass.Horizon-time.Minute),           // its Event may have expired
		promo("controller", "controller:kargo-ctl", -5*time.Second), // another Kargo controller's
	}
}

// gateBypassEvents lists the GateBypassed Events in the fake API.
func gateBypassEvents(t *testing.T, f *fixture) []corev1.Event {
	t.Helper()
	list, err := f.kube.CoreV1().Events("shop").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Event
	for _, e := range list.Items {
		if e.Reason == api.ReasonGateBypassed {
			out = append(out, e)
		}
	}
	return out
}

// bypassCount sums kargo_latch_gate_bypassed_total over the series with
// these labels.
func bypassCount(t *testing.T, reg *prometheus.Registry, labels map[string]string) float64 {
	t.Helper()
	const name = "kargo_latch_gate_bypassed_total"
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			total += m.GetCounter().GetValue()
		}
	}
	return total
}

// countGateBypassCreates counts the GateBypassed Events kube is asked to
// create from now on, made or refused.
func countGateBypassCreates(kube *kubefake.Clientset) *atomic.Int64 {
	creates := &atomic.Int64{}
	kube.PrependReactor("create", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if e, ok := a.(k8stesting.CreateAction).GetObject().(*corev1.Event); ok && e.Reason == api.ReasonGateBypassed {
			creates.Add(1)
		}
		return false, nil, nil
	})
	return creates
}

// TestGateBypassWarnsOncePerPromotion: a restarted operator lists every
// Promotion again. The ones auto-promoted under a pause get one Warning
// each; people's, older ones and those created before the pause get none;
// a second operator over the same API (a restart, or the other replica)
// tries again, finds the Event and neither warns nor counts.
func TestGateBypassWarnsOncePerPromotion(t *testing.T) {
	now := time.Now()
	var creates *atomic.Int64
	f := newFixtureWith(t, false, func(f *fixture) { creates = countGateBypassCreates(f.kube) }, bypassObjects(now)...)

	labels := map[string]string{metrics.LabelProject: "shop", metrics.LabelStage: "prod"}
	waitUntil(t, func() bool { return len(gateBypassEvents(t, f)) >= 2 })
	waitUntil(t, func() bool { return bypassCount(t, f.reg, labels) >= 2 })
	evs := gateBypassEvents(t, f)
	if len(evs) != 2 {
		t.Errorf("%d GateBypassed Events, want 2", len(evs))
	}
	related := map[string]bool{}
	for _, e := range evs {
		if e.Type != corev1.EventTypeWarning || e.InvolvedObject.Kind != "Stage" || e.InvolvedObject.Name != "prod" || e.InvolvedObject.UID != "stage-uid" {
			t.Errorf("Event %+v, want a Warning on Stage prod", e)
		}
		if !strings.Contains(e.Message, "StagePause hold (reason Manual)") || !strings.Contains(e.Message, "kargo-latch-pause-gate") {
			t.Errorf("message %q does not name the pause and the policy", e.Message)
		}
		related[e.Related.Name] = true
		// The requester, stamped on "bypass" only, and what to check: an
		// auto-promotion's shape passed, so the gate is not in force.
		requester := "by an unknown user"
		if e.Related.Name == "bypass" {
			requester = "by kargo-shard-eu,"
		}
		if !strings.Contains(e.Message, requester) || !strings.Contains(e.Message, "check that the pause gate's ValidatingAdmissionPolicy and binding") {
			t.Errorf("message %q does not name the requester (%q) and what to check", e.Message, requester)
		}
	}
	if !related["bypass"] || !related["controller"] {
		t.Errorf("Events about %v, want bypass and controller", related)
	}
	if got := bypassCount(t, f.reg, labels); got != 2 {
		t.Errorf("gate_bypassed_total = %v, want 2", got)
	}

	// Kargo moves the Promotion on: this process does not even try again.
	u, err := f.client.Resource(kargo.PromotionsResource).Namespace("shop").Get(context.Background(), "bypass", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	u.Object["status"] = map[string]any{"phase": "Succeeded"}
	syncs := f.syncs()
	if _, err := f.client.Resource(kargo.PromotionsResource).Namespace("shop").Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The update enqueues the Stage after it was looked at: its sync proves
	// the look.
	waitUntil(t, func() bool { return f.syncs() > syncs })
	if n := creates.Load(); n != 2 {
		t.Errorf("%d GateBypassed creates after an update, want still 2", n)
	}

	// A second operator over the same API: it judges both again (two more
	// creates, refused as AlreadyExists), warns and counts nothing.
	reg := prometheus.NewRegistry()
	c, err := New(Config{Dynamic: f.client, Kube: f.kube, Recorder: f.recorder, Metrics: metrics.New(reg, "test")})
	if err != nil {
		t.Fatal(err)
	}
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitUntil(t, func() bool { return creates.Load() == 4 })
	if n := len(gateBypassEvents(t, f)); n != 2 {
		t.Errorf("%d GateBypassed Events after a restart, want still 2", n)
	}
	if got := bypassCount(t, reg, labels); got != 0 {
		t.Errorf("the restarted operator counted %v bypasses, want 0", got)
	}
}

// TestGateBypassOfAFinishedPromotionIsReportedAtStart: an auto-promotion
// passed the gate of a paused Stage and finished while no operator ran.
// The starting operator's list sees it once, and reports it, although it
// never caches it; another operator after it finds the Event there.
func TestGateBypassOfAFinishedPromotionIsReportedAtStart(t *testing.T) {
	now := time.Now()
	objs := bypassObjects(now)
	for _, o := range objs {
		if o.GetKind() == "Promotion" && o.GetName() == "bypass" {
			o.Object["status"] = map[string]any{"phase": "Succeeded"}
		}
	}
	f := newFixtureWith(t, false, nil, objs...)
	labels := map[string]string{metrics.LabelProject: "shop", metrics.LabelStage: "prod"}
	waitUntil(t, func() bool { return bypassCount(t, f.reg, labels) == 2 })
	related := map[string]bool{}
	for _, e := range gateBypassEvents(t, f) {
		related[e.Related.Name] = true
	}
	if len(related) != 2 || !related["bypass"] || !related["controller"] {
		t.Errorf("GateBypassed about %v, want the finished bypass and the unfinished controller one", related)
	}
	if got := cachedNames(f.c, "prod"); slices.Contains(got, "bypass") {
		t.Errorf("cached %v: the finished bypass", got)
	}

	// The next operator judges it again from its own list (two more
	// creates), and finds the Event made: no second warning, no count.
	creates := countGateBypassCreates(f.kube)
	reg := prometheus.NewRegistry()
	c, err := New(Config{Dynamic: f.client, Kube: f.kube, Recorder: f.recorder, Metrics: metrics.New(reg, "test")})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	defer func() { cancel(); <-done }()
	waitUntil(t, c.HasSynced)
	waitUntil(t, func() bool { return creates.Load() == 2 })
	if n := len(gateBypassEvents(t, f)); n != 2 {
		t.Errorf("%d GateBypassed Events after a restart, want still 2", n)
	}
	if got := bypassCount(t, reg, labels); got != 0 {
		t.Errorf("the restarted operator counted %v bypasses, want 0", got)
	}
}
