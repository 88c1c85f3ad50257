// Command demo plays kargo-latch's main job on a local test cluster: it
// starts kube-apiserver and etcd, installs Kargo's CRDs, runs the operator,
// and drives a Stage through a promotion, health flaps and a degradation
// while narrating what kargo-latch does. Run it with `make demo`.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/controller"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/metrics"
	"github.com/kargo-latch/kargo-latch/test/cluster"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

const project = "shop"

var start = time.Now()

func say(format string, args ...any) {
	fmt.Printf("[%5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

// kargoToken authenticates the demo as Kargo's controller ServiceAccount.
const kargoToken = "demo-kargo-controller" //nolint:gosec // a throwaway local cluster

type demo struct {
	kargo dynamic.Interface // as Kargo's controller
	dyn   dynamic.Interface
	kube  kubernetes.Interface
	reg   *prometheus.Registry
	stage *driver.Stage
}

func run(ctx context.Context) error {
	say("Starting a local kube-apiserver v1.37.2 and etcd v3.7.0 (built from Go modules into bin/)")
	c, err := cluster.Start(ctx, cluster.Options{
		Log:    func(f string, a ...any) { say("  "+f, a...) },
		Tokens: []string{kargoToken + ",system:serviceaccount:kargo:kargo-controller,kargo-controller,"},
	})
	if err != nil {
		return err
	}
	defer c.Stop()
	if err := installGate(ctx, c); err != nil {
		return err
	}
	say("  installed the pause gate (ValidatingAdmissionPolicy) from manifests/components/pause-gate")
	d := &demo{
		dyn:   dynamic.NewForConfigOrDie(c.Config),
		kube:  kubernetes.NewForConfigOrDie(c.Config),
		kargo: dynamic.NewForConfigOrDie(c.UserConfig(kargoToken)),
		reg:   prometheus.NewRegistry(),
	}
	if _, err := d.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: project}}, metav1.CreateOptions{}); err != nil {
		return err
	}

	klog.SetOutput(os.Stderr)
	op, err := controller.New(controller.Config{
		Dynamic:      d.dyn,
		Kube:         d.kube,
		Namespaces:   []string{project},
		Defaults:     latch.Settings{LatchDeadline: 30 * time.Minute, DegradedGrace: 5 * time.Minute, DrainOnPause: true},
		Metrics:      metrics.New(d.reg, "demo"),
		QueueMetrics: metrics.NewWorkqueueProvider(d.reg),
	})
	if err != nil {
		return err
	}
	opCtx, stopOp := context.WithCancel(ctx)
	defer stopOp()
	go func() { _ = op.Run(opCtx) }()
	say("kargo-latch is running, watching project %q", project)

	k := driver.New(d.dyn)
	d.stage, err = k.CreateStage(ctx, project, "prod", map[string]string{
		controller.DegradedGraceAnnotation:  "4s",
		controller.PauseOnFailureAnnotation: "true",
	})
	if err != nil {
		return err
	}
	say("Created Stage %s/prod with kargo-latch.io/degraded-grace=4s and pause-on-failure=true", project)
	return d.play(ctx)
}

func (d *demo) play(ctx context.Context) error {
	s := d.stage
	say("")
	say("1. Kargo promotes new Freight to prod; the Argo CD app rolls out (Progressing)")
	if _, err := s.StartPromotion(ctx); err != nil {
		return err
	}
	name, err := s.FinishPromotion(ctx, "Succeeded")
	if err != nil {
		return err
	}
	say("   Promotion %s Succeeded", name)
	if err := s.SetHealth(ctx, kargo.HealthProgressing); err != nil {
		return err
	}
	if err := d.waitPhase(ctx, latch.PhasePromoted); err != nil {
		return err
	}
	if err := s.SetHealth(ctx, kargo.HealthHealthy); err != nil {
		return err
	}
	say("   The app turns Healthy")
	if err := d.waitPhase(ctx, latch.PhaseLatched); err != nil {
		return err
	}
	d.showRecord(ctx)

	say("")
	say("2. The app autoscales: health flaps Healthy <-> Progressing ten times")
	before, err := s.Get(ctx)
	if err != nil {
		return err
	}
	for i := range 10 {
		h := kargo.HealthProgressing
		if i%2 == 1 {
			h = kargo.HealthHealthy
		}
		if err := s.SetHealth(ctx, h); err != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second)
	after, err := s.Get(ctx)
	if err != nil {
		return err
	}
	same := before.GetAnnotations()[controller.StateAnnotation] == after.GetAnnotations()[controller.StateAnnotation]
	say("   Latch record unchanged by the flaps: %t (kargo-latch wrote nothing)", same)
	d.showMetrics("kargo_latch_progressing_ignored_total", "kargo_latch_stage_phase")

	say("")
	say("3. The app breaks: Kargo reports Unhealthy; the grace is 4s")
	if err := s.SetHealth(ctx, kargo.HealthUnhealthy, `Argo CD Application "prod" has health state "Degraded"`); err != nil {
		return err
	}
	if err := d.waitPhase(ctx, latch.PhaseDegraded); err != nil {
		return err
	}
	say("   ...no further change from Kargo; the grace runs out by itself")
	if err := d.waitPhase(ctx, latch.PhaseFailed); err != nil {
		return err
	}
	d.showRecord(ctx)
	d.showMetrics("kargo_latch_failures_total", "kargo_latch_stage_phase")
	return d.pauseAndResume(ctx)
}

func (d *demo) pauseAndResume(ctx context.Context) error {
	say("")
	say("4. pause-on-failure: kargo-latch created a StagePause; the Stage is paused")
	var pause string
	if err := waitUntil(func() bool {
		l, err := d.dyn.Resource(v1alpha1.StagePausesResource).Namespace(project).List(ctx, metav1.ListOptions{})
		if err == nil && len(l.Items) == 1 {
			pause = l.Items[0].GetName()
		}
		return pause != "" && d.labelIs(ctx, "true")
	}); err != nil {
		return err
	}
	say("   StagePause %s; label kargo-latch.io/paused=true", pause)
	d.showMetrics("kargo_latch_stage_paused", "kargo_latch_pauses_total")

	say("")
	say("5. Kargo's controller tries to auto-promote newer Freight to prod")
	_, err := driver.CreatePromotion(ctx, d.kargo, project, "prod", "")
	if err == nil {
		return errors.New("the gate let an auto-promotion through to a paused Stage")
	}
	say("   the API server refused it: %v", err)

	say("")
	say("6. A lead resumes: deletes the StagePause")
	if err := d.dyn.Resource(v1alpha1.StagePausesResource).Namespace(project).Delete(ctx, pause, metav1.DeleteOptions{}); err != nil {
		return err
	}
	if err := waitUntil(func() bool { return d.labelIs(ctx, "") }); err != nil {
		return err
	}
	u, err := d.stage.Get(ctx)
	if err != nil {
		return err
	}
	say("   label gone; kargo.akuity.io/refresh=%s asks Kargo to re-attempt at once", u.GetAnnotations()[kargo.RefreshAnnotation])
	if err := waitUntil(func() bool {
		_, err := driver.CreatePromotion(ctx, d.kargo, project, "prod", "")
		return err == nil
	}); err != nil {
		return err
	}
	say("   Kargo's auto-promotion to prod is allowed again")
	time.Sleep(500 * time.Millisecond)
	d.showEvents(ctx)
	say("")
	say("Done. The metrics server, alert rules, Deployment and CLI come with the next issues.")
	return nil
}

func (d *demo) labelIs(ctx context.Context, want string) bool {
	u, err := d.stage.Get(ctx)
	return err == nil && u.GetLabels()[controller.PausedLabel] == want
}

func waitUntil(cond func() bool) error {
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return errors.New("timed out")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// installGate installs the shipped pause gate, and lets the demo's stand-in
// for Kargo's controller create Promotions as the real one may.
func installGate(ctx context.Context, c *cluster.Cluster) error {
	objs, err := cluster.ReadObjects(filepath.Join(c.Root, "manifests", "components", "pause-gate", "gate.yaml"))
	if err != nil {
		return err
	}
	role := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
		"metadata": map[string]any{"name": "demo-kargo-controller"},
		"rules": []any{map[string]any{
			"apiGroups": []any{"kargo.akuity.io"}, "resources": []any{"promotions"}, "verbs": []any{"create"},
		}},
	}}
	binding := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
		"metadata": map[string]any{"name": "demo-kargo-controller"},
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "demo-kargo-controller"},
		"subjects": []any{map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "system:serviceaccount:kargo:kargo-controller"}},
	}}
	return cluster.Apply(ctx, c.Config, append(objs, role, binding)...)
}

func (d *demo) record(ctx context.Context) (latch.Record, error) {
	u, err := d.stage.Get(ctx)
	if err != nil {
		return latch.Record{}, err
	}
	return latch.Decode(u.GetAnnotations()[controller.StateAnnotation])
}

func (d *demo) waitPhase(ctx context.Context, phase latch.Phase) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if r, err := d.record(ctx); err == nil && r.Phase == phase {
			say("   kargo-latch: phase %s", phase)
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("stage never reached phase %s", phase)
}

func (d *demo) showRecord(ctx context.Context) {
	r, err := d.record(ctx)
	if err != nil {
		say("   (cannot read the record: %v)", err)
		return
	}
	say("   kargo-latch.io/state: phase=%s promotion=%s", r.Phase, r.Promotion)
	if v := r.Verification; v != nil {
		say("     verification: %s by %s, %s -> %s: %s", v.Phase, v.Actor, v.StartTime.Format(time.TimeOnly), v.FinishTime.Format(time.TimeOnly), v.Message)
	}
	if f := r.Failure; f != nil {
		say("     failure: %s: %s", f.Reason, f.Message)
	}
}

func (d *demo) showMetrics(names ...string) {
	mfs, err := d.reg.Gather()
	if err != nil {
		return
	}
	for _, mf := range mfs {
		for _, want := range names {
			if mf.GetName() != want {
				continue
			}
			for _, m := range mf.GetMetric() {
				var labels []string
				for _, l := range m.GetLabel() {
					labels = append(labels, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
				}
				v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
				if v != 0 {
					say("   %s{%s} %g", want, strings.Join(labels, ","), v)
				}
			}
		}
	}
}

func (d *demo) showEvents(ctx context.Context) {
	list, err := d.kube.CoreV1().Events(project).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	// Timestamps have one-second precision; break ties in story order.
	rank := map[string]int{"HealthLatched": 1, "StageDegraded": 2, "LatchFailed": 3, "StagePaused": 4, "PromotionDrained": 5, "StageResumed": 6}
	sort.SliceStable(list.Items, func(i, j int) bool {
		a, b := list.Items[i], list.Items[j]
		if !a.FirstTimestamp.Equal(&b.FirstTimestamp) {
			return a.FirstTimestamp.Before(&b.FirstTimestamp)
		}
		return rank[a.Reason] < rank[b.Reason]
	})
	say("   Events on Stage prod (kubectl get events -n %s):", project)
	for _, e := range list.Items {
		say("     %-8s %-15s %s", e.Type, e.Reason, e.Message)
	}
}
