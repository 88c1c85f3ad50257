package e2e

import (
	"bytes"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/controller/gatebypass"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

const gateMetric = "kargo_latch_gate_bypassed_total"

// otherKargoController is Kargo's controller installed under another
// identity than the gate names: a ServiceAccount kargo-controller of the
// project's own namespace (system:serviceaccount:<ns>:kargo-controller, not
// system:serviceaccount:kargo:kargo-controller), with the right to create
// Promotions there. Its auto-promotions pass the shipped gate unseen.
func otherKargoController(t *testing.T, ns string) dynamic.Interface {
	t.Helper()
	_, err := env.kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "kargo-controller"}}, metav1.CreateOptions{})
	must(t, err)
	_, err = env.kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "other-kargo-controller"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "e2e-kargo-controller"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "kargo-controller", Namespace: ns}},
	}, metav1.CreateOptions{})
	must(t, err)
	cfg, err := env.cluster.ServiceAccountConfig(ctx, ns, "kargo-controller")
	must(t, err)
	return dynamic.NewForConfigOrDie(cfg)
}

// countBypassReports counts the operator's requests that create a
// GateBypassed Event, whatever the answer (made, or AlreadyExists). It
// refuses nothing.
func countBypassReports(n *atomic.Int64) func(*http.Request) error {
	return func(r *http.Request) error {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/events") || r.GetBody == nil {
			return nil
		}
		if body, err := r.GetBody(); err == nil {
			b, _ := io.ReadAll(body)
			if bytes.Contains(b, []byte(api.ReasonGateBypassed)) {
				n.Add(1)
			}
		}
		return nil
	}
}

// pauseInForce pauses stage with a StagePause made by dev, waits until the
// operator shows it, proves with Kargo's controller identity that the gate
// enforces it (a 403; where the requester mark is installed, it may answer
// 503 for a moment first), and waits until the clock has left the pause's
// second (creation times have whole seconds: a Promotion of the same second
// is not judged to come after the pause).
func pauseInForce(t *testing.T, s *driver.Stage, name string) {
	t.Helper()
	must(t, createPause(env.dev, pause(s.Namespace, name, s.Name, "Manual")))
	waitPaused(t, s, true)
	waitShippedGateRefuses(t, s.Namespace, s.Name)
	p, err := env.dyn.Resource(v1alpha1.StagePausesResource).Namespace(s.Namespace).Get(ctx, name, metav1.GetOptions{})
	must(t, err)
	created := p.GetCreationTimestamp().Time
	waitFor(t, "the pause to be older than the bypass margin", func() bool {
		return time.Now().Truncate(time.Second).After(created.Add(gatebypass.Margin))
	})
}

// TestGateBypassedIsReported: Kargo's controller runs as another identity
// than the gate names, so its auto-promotion to a paused Stage passes. The
// operator warns once (GateBypassed on the Stage, the counter), naming the
// username that created it (which the API server stamped on it: the opt-in
// requester mark is installed) and the setting to widen; not for an
// auto-promotion to an unpaused Stage (not marked), nor for a person's
// Promotion to the paused one (marked too, as every Promotion made under a
// pause is, but no auto-promotion), nor for one queued before the pause;
// and a restarted operator, which judges the same Promotion again, neither
// warns nor counts again.
func TestGateBypassedIsReported(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	installRequestedBy(t, ns)
	var reports atomic.Int64
	settings := latch.Settings{LatchDeadline: time.Minute, DegradedGrace: time.Minute, DrainOnPause: true}
	op := startOperatorWith(t, env.operator, ns, settings, refusing(countBypassReports(&reports)))
	prod := env.createStage(t, ns, "prod", nil)
	dev := env.createStage(t, ns, "dev", nil)
	otherKargo := otherKargoController(t, ns)

	// Queued before the pause, by Kargo's controller: drained at pause time.
	queued, err := driver.CreatePromotion(ctx, env.kargoCtl, ns, "prod", "")
	must(t, err)
	pauseInForce(t, prod, "hold")
	waitMarked(t, ns)
	waitFor(t, "the queued auto-promotion to be drained", func() bool {
		p, err := env.dyn.Resource(kargo.PromotionsResource).Namespace(ns).Get(ctx, queued.GetName(), metav1.GetOptions{})
		must(t, err)
		return p.GetAnnotations()[kargo.AbortAnnotation] != ""
	})

	// Not bypasses, each seen by the operator (a sync of its Stage follows
	// the look at the Promotion): an auto-promotion to an unpaused Stage,
	// and a person's Promotion to the paused one (the gate lets people pass).
	var unpaused, person *unstructured.Unstructured
	op.sees(t, "an auto-promotion to the unpaused Stage dev", func() (err error) {
		unpaused, err = driver.CreatePromotion(ctx, otherKargo, ns, "dev", "")
		return err
	})
	op.sees(t, "a person's Promotion to the paused Stage", func() (err error) {
		person, err = driver.CreatePromotion(ctx, env.dev, ns, "prod", "kubernetes:dev")
		return err
	})
	if n := reports.Load(); n != 0 {
		t.Fatalf("%d GateBypassed reports before any bypass, want 0", n)
	}
	if by, ok := unpaused.GetAnnotations()[api.RequestedByAnnotation]; ok {
		t.Errorf("the auto-promotion to the unpaused Stage is marked requested-by %q: only Promotions made under a pause are", by)
	}
	if by := person.GetAnnotations()[api.RequestedByAnnotation]; by != "dev" {
		t.Errorf("the person's Promotion to the paused Stage is marked requested-by %q, want dev: every Promotion made under a pause is", by)
	}

	// The bypass: the other identity is missing from Kargo's own regex, so
	// Kargo's webhook stamps its auto-promotion kubernetes:<user>, as a
	// person's; the gate lets that pass (issue 24: the gate refuses
	// Promotions by shape, so only this case passes it).
	otherUser := "system:serviceaccount:" + ns + ":kargo-controller"
	if _, err := driver.CreatePromotion(ctx, otherKargo, ns, "prod", ""); !apierrors.IsForbidden(err) {
		t.Errorf("the other identity's actor-less auto-promotion: %v, want refused by shape", err)
	}
	start := time.Now()
	bypass, err := driver.CreatePromotion(ctx, otherKargo, ns, "prod", "kubernetes:"+otherUser)
	if err != nil {
		t.Fatalf("the gate refused the other identity's Promotion stamped as a person's (the test needs it to pass): %v", err)
	}
	if by := bypass.GetAnnotations()[api.RequestedByAnnotation]; by != otherUser {
		t.Errorf("the bypassing Promotion is marked requested-by %q, want %s", by, otherUser)
	}
	ev := waitEvent(t, prod, api.ReasonGateBypassed)
	t.Logf("GateBypassed %v after the bypassing Promotion was created", time.Since(start).Round(time.Millisecond))
	if ev.Type != corev1.EventTypeWarning || ev.Related == nil || ev.Related.Name != bypass.GetName() ||
		!strings.Contains(ev.Message, bypass.GetName()) || !strings.Contains(ev.Message, "StagePause hold (reason Manual)") {
		t.Errorf("GateBypassed Event %s %q (related %+v), want a Warning naming %s and the pause hold", ev.Type, ev.Message, ev.Related, bypass.GetName())
	}
	if !strings.Contains(ev.Message, "by Kargo controller "+otherUser+",") || !strings.Contains(ev.Message, "webhooksServer.controlplaneUserRegex") {
		t.Errorf("GateBypassed %q does not name the requester %s and the setting to widen", ev.Message, otherUser)
	}
	waitFor(t, "the bypass to be counted", func() bool { return op.metric(gateMetric, "project", ns, "stage", "prod") == 1 })

	// Kargo runs it to its end: each update is seen, none reported again.
	op.sees(t, "the bypassing Promotion running", func() error { return env.kargo.SetPromotionPhase(ctx, ns, bypass.GetName(), "Running") })
	op.sees(t, "the bypassing Promotion succeeding", func() error {
		return env.kargo.SetPromotionPhase(ctx, ns, bypass.GetName(), "Succeeded")
	})
	if n := reports.Load(); n != 1 {
		t.Errorf("%d GateBypassed reports, want 1: the queued, the unpaused Stage's, the person's and the updates are no bypass", n)
	}
	if got := op.metric(gateMetric); got != 1 {
		t.Errorf("%s = %v over all Stages, want 1", gateMetric, got)
	}
	if got := env.stageEvents(t, dev)[api.ReasonGateBypassed]; len(got) != 0 {
		t.Errorf("GateBypassed on the unpaused Stage: %+v", got)
	}

	// A restart: the new operator lists the Promotion again, judges it a
	// bypass again (it tries the Event: AlreadyExists), and neither warns
	// nor counts.
	op.stop()
	var again atomic.Int64
	op2 := startOperatorWith(t, env.operator, ns, settings, refusing(countBypassReports(&again)))
	waitFor(t, "the restarted operator to judge the bypass again", func() bool { return again.Load() >= 1 })
	op2.idle(t)
	if n := again.Load(); n != 1 {
		t.Errorf("the restarted operator tried %d GateBypassed Events, want 1 (the one bypass)", n)
	}
	if got := op2.metric(gateMetric); got != 0 {
		t.Errorf("the restarted operator counted %v bypasses, want 0", got)
	}
	if evs := env.stageEvents(t, prod)[api.ReasonGateBypassed]; len(evs) != 1 || evs[0].Count != 1 {
		t.Errorf("GateBypassed Events after the restart: %d, want the one (count 1)", len(evs))
	}
}

// TestGateBypassedFiresTheAlert: the operator binary and a real Prometheus
// with the shipped rules; a bypass of the gate fires KargoLatchGateBypassed
// for the Stage.
func TestGateBypassedFiresTheAlert(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	metricsURL := metricsProcess(t, ns, "--kargo-controller-regex", e2eKargoControllerRegex)
	prom := startPrometheus(t, metricsURL[len("http://"):len(metricsURL)-len("/metrics")])
	prod := env.createStage(t, ns, "prod", nil)
	otherKargo := otherKargoController(t, ns)
	pauseInForce(t, prod, "hold")

	labels := map[string]string{"project": ns, "stage": "prod", "severity": "critical"}
	if prom.firing(t, "KargoLatchGateBypassed", labels) != nil {
		t.Fatal("KargoLatchGateBypassed fires before any bypass")
	}
	_, err := driver.CreatePromotion(ctx, otherKargo, ns, "prod", "kubernetes:system:serviceaccount:"+ns+":kargo-controller")
	must(t, err)
	start := time.Now()
	waitFor(t, "KargoLatchGateBypassed to fire", func() bool { return prom.firing(t, "KargoLatchGateBypassed", labels) != nil })
	t.Logf("KargoLatchGateBypassed fired %v after the bypass (1s scrape and evaluation)", time.Since(start).Round(time.Millisecond))
}
