package controller

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/metrics"
)

func TestCoveringAt(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	pause := func(name, stage string, created time.Time, deleting bool) *v1alpha1.StagePause {
		p := &v1alpha1.StagePause{Spec: v1alpha1.StagePauseSpec{Stage: stage}}
		p.Name, p.CreationTimestamp = name, metav1.NewTime(created)
		if deleting {
			now := metav1.NewTime(at)
			p.DeletionTimestamp = &now
		}
		return p
	}
	promo := &kargo.Promotion{Stage: "prod"}
	promo.CreationTimestamp = metav1.NewTime(at)
	for _, tc := range []struct {
		name  string
		pause *v1alpha1.StagePause
		want  bool
	}{
		{"the Stage's, before", pause("a", "prod", at.Add(-GateBypassMargin), false), true},
		{"the Stage's, within the margin", pause("a", "prod", at.Add(-GateBypassMargin+time.Second), false), false},
		{"project-wide, before", pause("a", "*", at.Add(-time.Hour), false), true},
		{"the same second", pause("a", "prod", at, false), false},
		{"after", pause("a", "prod", at.Add(time.Second), false), false},
		{"another Stage", pause("a", "dev", at.Add(-time.Minute), false), false},
		{"being deleted", pause("a", "prod", at.Add(-time.Minute), true), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := len(coveringAt([]*v1alpha1.StagePause{tc.pause}, promo)) > 0; got != tc.want {
				t.Errorf("covered = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestBypassCandidate(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	promo := func(actor string, age time.Duration) *kargo.Promotion {
		p := &kargo.Promotion{Stage: "prod"}
		p.CreationTimestamp = metav1.NewTime(now.Add(-age))
		if actor != "" {
			p.Annotations = map[string]string{kargo.CreateActorAnnotation: actor}
		}
		return p
	}
	noStage := promo("", time.Second)
	noStage.Stage = ""
	for _, tc := range []struct {
		name string
		p    *kargo.Promotion
		want bool
	}{
		{"no actor", promo("", time.Second), true},
		{"a controller", promo("controller:kargo-controller", time.Second), true},
		{"a person", promo("kubernetes:dev", time.Second), false},
		{"Kargo's API for a person", promo("admin", time.Second), false},
		{"older than its Event lives", promo("", bypassHorizon+time.Second), false},
		{"no Stage", noStage, false},
		{"no creation time", &kargo.Promotion{Stage: "prod"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := bypassCandidate(tc.p, now); got != tc.want {
				t.Errorf("candidate = %v, want %v", got, tc.want)
			}
		})
	}
}

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
		promo("old", "", -bypassHorizon-time.Minute),                // its Event may have expired
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

// TestGateBypassWarnsOncePerPromotion: a restarted operator lists every
// Promotion again. The ones auto-promoted under a pause get one Warning
// each; people's, older ones and those created before the pause get none;
// a second operator over the same API (a restart, or the other replica)
// tries again, finds the Event and neither warns nor counts.
func TestGateBypassWarnsOncePerPromotion(t *testing.T) {
	now := time.Now()
	var creates atomic.Int64
	f := newFixtureWith(t, false, func(f *fixture) {
		f.kube.PrependReactor("create", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
			if e, ok := a.(k8stesting.CreateAction).GetObject().(*corev1.Event); ok && e.Reason == api.ReasonGateBypassed {
				creates.Add(1)
			}
			return false, nil, nil
		})
	}, bypassObjects(now)...)

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
		// The requester, stamped on "bypass" only, and the setting to widen.
		requester := "by an unknown user"
		if e.Related.Name == "bypass" {
			requester = "by kargo-shard-eu,"
		}
		if !strings.Contains(e.Message, requester) || !strings.Contains(e.Message, "pauseGate.kargoControllers") ||
			!strings.Contains(e.Message, "kargo-latch-kargo-controllers") {
			t.Errorf("message %q does not name the requester (%q) and the setting to widen", e.Message, requester)
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

// TestGateBypassMessage: the Warning names the Promotion, the pauses, who
// created it, the setting to widen and what to check if the setting names it
// already; without the API server's stamp, it says the username is unknown
// and how to turn the stamp on. Many pauses, long names, a 900-character
// username: it stays within an Event's 1024 characters, the advice whole.
func TestGateBypassMessage(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	pause := func(name string) *v1alpha1.StagePause {
		return &v1alpha1.StagePause{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.StagePauseSpec{Stage: "prod"}}
	}
	promo := func(name, requester string) *kargo.Promotion {
		p := &kargo.Promotion{Stage: "prod"}
		p.Name, p.CreationTimestamp = name, metav1.NewTime(at)
		if requester != "" {
			p.Annotations = map[string]string{api.RequestedByAnnotation: requester}
		}
		return p
	}
	advice := []string{"pauseGate.kargoControllers", "pauseGate.kargoControllerRegex", "ConfigMap kargo-latch-kargo-controllers",
		"If it is named there already, check that the pause gate's ValidatingAdmissionPolicy and binding (kargo-latch-pause-gate in a default install) are installed.",
		"Runbook KargoLatchGateBypassed"}
	long := strings.Repeat("x", 240)
	many := []*v1alpha1.StagePause{pause("a" + long), pause("b" + long), pause("c"), pause("d"), pause("e")}
	for _, tc := range []struct {
		name   string
		p      *kargo.Promotion
		pauses []*v1alpha1.StagePause
		want   []string
	}{
		{"stamped", promo("prod.01j.abc", "kargo-shard-eu"), []*v1alpha1.StagePause{pause("hold")},
			[]string{"Auto-promotion prod.01j.abc, created at 2026-12-01T10:00:00Z by kargo-shard-eu,", "StagePause hold (reason Manual)", "if that user is one of Kargo's (a shard?), add it to"}},
		{"not stamped", promo("prod.01j.abc", ""), []*v1alpha1.StagePause{pause("hold")},
			[]string{"by an unknown user", "no " + api.RequestedByAnnotation, "turn on the requester mark", "pauseGate.requestedBy.enabled", "components/requested-by", "1.36", "add that username to"}},
		{"many pauses", promo("prod.01j.abc", "kargo-shard-eu"), []*v1alpha1.StagePause{pause("a"), pause("b"), pause("c"), pause("d"), pause("e")},
			[]string{"StagePause a (reason Manual), b (reason Manual), c (reason Manual), and 2 more covered"}},
		{"many pauses, long names", promo("prod."+long, "system:serviceaccount:"+long[:100]), many,
			[]string{"by system:serviceaccount:" + long[:100] + ","}},
		{"a 900-character username", promo("prod."+long, strings.Repeat("u", 900)), many,
			[]string{"by " + strings.Repeat("u", maxRequesterShown) + "…,"}},
		{"not stamped, long names", promo("prod."+long, ""), many, []string{"by an unknown user"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := gateBypassMessage(tc.p, tc.pauses)
			if len(msg) > 1024 {
				t.Errorf("message of %d characters, over an Event's 1024: %q", len(msg), msg)
			}
			for _, want := range append(tc.want, advice...) {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q does not say %q", msg, want)
				}
			}
		})
	}
}

// TestRefusedGateBypassReportIsRetried: the API server refuses the first
// GateBypassed Event of each bypass (a finished one, which no later event
// of its own brings back, and an unfinished one). Each is reported once
// Events can be written, and counted once.
func TestRefusedGateBypassReportIsRetried(t *testing.T) {
	objs := bypassObjects(time.Now())
	runtimeObjs := make([]runtime.Object, 0, len(objs))
	for _, o := range objs {
		if o.GetKind() == "Promotion" && o.GetName() == "bypass" {
			o.Object["status"] = map[string]any{"phase": "Succeeded"}
		}
		runtimeObjs = append(runtimeObjs, o)
	}
	client := newFakeDynamic(runtimeObjs...)
	kube := kubefake.NewClientset()
	var refused atomic.Int64
	kube.PrependReactor("create", "events", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if e, ok := a.(k8stesting.CreateAction).GetObject().(*corev1.Event); ok && e.Reason == api.ReasonGateBypassed && refused.Load() < 2 {
			refused.Add(1)
			return true, nil, apierrors.NewInternalError(errors.New("etcd is unwell"))
		}
		return false, nil, nil
	})
	reg := prometheus.NewRegistry()
	c, err := New(Config{Dynamic: client, Kube: kube, Recorder: record.NewFakeRecorder(100), Metrics: metrics.New(reg, "test")})
	if err != nil {
		t.Fatal(err)
	}
	c.bypass.retryAfter = 20 * time.Millisecond
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = c.Run(ctx) }()
	defer func() { cancel(); <-done }()

	labels := map[string]string{metrics.LabelProject: "shop", metrics.LabelStage: "prod"}
	waitUntil(t, func() bool { return bypassCount(t, reg, labels) == 2 })
	if n := refused.Load(); n != 2 {
		t.Errorf("%d reports refused, want the first 2", n)
	}
	list, err := kube.CoreV1().Events("shop").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	related := map[string]int{}
	for _, e := range list.Items {
		if e.Reason == api.ReasonGateBypassed {
			related[e.Related.Name]++
		}
	}
	if len(related) != 2 || related["bypass"] != 1 || related["controller"] != 1 {
		t.Errorf("GateBypassed Events %v, want one for each bypass", related)
	}
}
