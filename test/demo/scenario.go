package main

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

func (d *demo) play(ctx context.Context) error {
	k := driver.New(d.admin)
	if err := d.playOutOfPhaseApps(ctx, k); err != nil {
		return err
	}
	return d.playFailureAndPause(ctx, k)
}

// playFailureAndPause is the second story: a latch that holds through
// flapping, a failure that pauses the Stage, the gate, and the people's
// rights to pause and resume.
func (d *demo) playFailureAndPause(ctx context.Context, k *driver.Kargo) error {
	say("")
	prod, err := k.CreateStage(ctx, project, "prod", map[string]string{
		api.DegradedGraceAnnotation:  "4s",
		api.PauseOnFailureAnnotation: "true",
	})
	if err != nil {
		return err
	}
	qa, err := k.CreateStage(ctx, project, "qa", nil)
	if err != nil {
		return err
	}
	say("Created Stages qa and prod; prod has degraded-grace=4s and pause-on-failure=true")
	if err := d.waitFor(ctx, "the operator to see the Stages", func() bool { return d.phase(ctx, prod) == latch.PhaseIdle }); err != nil {
		return err
	}

	say("")
	say("2. Kargo promotes new Freight to qa and prod; the apps roll out, then autoscale")
	for _, s := range []*driver.Stage{qa, prod} {
		if _, err := s.StartPromotion(ctx); err != nil {
			return err
		}
		if _, err := s.FinishPromotion(ctx, "Succeeded"); err != nil {
			return err
		}
		if err := s.SetHealth(ctx, kargo.HealthProgressing); err != nil {
			return err
		}
	}
	if err := d.waitFor(ctx, "Promoted", func() bool { return d.phase(ctx, prod) == latch.PhasePromoted }); err != nil {
		return err
	}
	for _, s := range []*driver.Stage{qa, prod} {
		if err := s.SetHealth(ctx, kargo.HealthHealthy); err != nil {
			return err
		}
	}
	if err := d.waitFor(ctx, "the latch", func() bool { return d.phase(ctx, prod) == latch.PhaseLatched }); err != nil {
		return err
	}
	say("   Healthy once: kargo-latch latched both (HealthLatched)")
	before, _ := prod.Get(ctx)
	for i := range 10 {
		h := kargo.HealthProgressing
		if i%2 == 1 {
			h = kargo.HealthHealthy
		}
		if err := prod.SetHealth(ctx, h); err != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond)
	after, _ := prod.Get(ctx)
	say("   prod flapped Healthy <-> Progressing 10 times: still %s, record unchanged: %t",
		d.phase(ctx, prod), before.GetAnnotations()[api.StateAnnotation] == after.GetAnnotations()[api.StateAnnotation])
	d.showMetrics("kargo_latch_progressing_ignored_total", "kargo_latch_time_to_latch_seconds_count")
	d.showStatus()

	say("")
	say("3. prod breaks: Kargo reports Unhealthy, and nothing else changes")
	if err := prod.SetHealth(ctx, kargo.HealthUnhealthy, `Argo CD Application "prod" has health state "Degraded"`); err != nil {
		return err
	}
	if err := d.waitFor(ctx, "Degraded", func() bool { return d.phase(ctx, prod) == latch.PhaseDegraded }); err != nil {
		return err
	}
	say("   kargo-latch: Degraded; the 4s grace runs out by itself...")
	if err := d.waitFor(ctx, "the pause", func() bool { return d.paused(ctx, prod) }); err != nil {
		return err
	}
	say("   kargo-latch: Failed (Degraded), and created a StagePause: prod is paused")
	d.showMetrics("kargo_latch_stage_paused", "kargo_latch_pauses_total", "kargo_latch_failures_total")
	d.showStatus()

	say("")
	say("4. Kargo's controller tries to auto-promote newer Freight to prod")
	_, err = driver.CreatePromotion(ctx, d.kargo, project, "prod", "")
	if err == nil {
		return errGate
	}
	say("   the API server refused it (403): %s", shortError(err))
	if _, err := driver.CreatePromotion(ctx, d.kargo, project, "qa", ""); err != nil {
		return fmt.Errorf("auto-promotion to qa was refused: %w", err)
	}
	say("   auto-promotion to qa still passes")

	say("")
	say("5. dev (kargo-latch-pauser) pauses qa too, but cannot resume prod")
	d.cli("dev", d.devKubeconfig, "pause", "qa", "--reason", "Manual", "--message", "checking qa during the prod incident")
	d.cli("dev", d.devKubeconfig, "resume", "prod")
	if err := d.waitFor(ctx, "qa paused", func() bool { return d.paused(ctx, qa) }); err != nil {
		return err
	}
	d.showStatus()

	say("")
	say("6. lead (kargo-latch-resumer) resumes both")
	d.cli("lead", d.leadKubeconfig, "resume", "prod")
	d.cli("lead", d.leadKubeconfig, "resume", "qa")
	if err := d.waitFor(ctx, "the resume", func() bool { return !d.paused(ctx, prod) && !d.paused(ctx, qa) }); err != nil {
		return err
	}
	u, err := prod.Get(ctx)
	if err != nil {
		return err
	}
	say("   kargo-latch removed the paused labels and set kargo.akuity.io/refresh=%s", u.GetAnnotations()[kargo.RefreshAnnotation])
	if err := d.waitFor(ctx, "the gate to open", func() bool {
		_, err := driver.CreatePromotion(ctx, d.kargo, project, "prod", "")
		return err == nil
	}); err != nil {
		return err
	}
	say("   Kargo's auto-promotion to prod is allowed again")
	d.showMetrics("kargo_latch_stage_paused", "kargo_latch_resumes_total")
	d.showStatus()
	if err := d.waitForEvents(ctx, "prod", api.ReasonStageResumed); err != nil {
		return err
	}
	d.showEvents(ctx, "prod")
	pauses, _ := d.admin.Resource(v1alpha1.StagePausesResource).Namespace(project).List(ctx, metav1.ListOptions{})
	say("")
	say("Done: %d StagePauses left; everything above ran against a real kube-apiserver with RBAC and admission policies.", len(pauses.Items))
	return nil
}
