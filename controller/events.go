package controller

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/controller/pausing"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// afterStore reports the step's actions as Events and metrics.
func (c *Controller) afterStore(stage *kargo.Stage, pauses []*v1alpha1.StagePause, res latch.Result, labelRestored bool) {
	ns, name := stage.Namespace, stage.Name
	for _, a := range res.Actions {
		switch a.Kind {
		case latch.ActionLatched:
			c.report.Event(stage, corev1.EventTypeNormal, api.ReasonHealthLatched, a.Message)
			if a.TimeToLatch > 0 {
				c.cfg.Metrics.TimeToLatch.Observe(a.TimeToLatch.Seconds())
			}
		case latch.ActionDegraded:
			c.report.Event(stage, corev1.EventTypeWarning, api.ReasonStageDegraded, a.Message)
		case latch.ActionRecovered:
			c.report.Event(stage, corev1.EventTypeNormal, api.ReasonStageRecovered, a.Message)
		case latch.ActionFailed:
			c.report.Event(stage, corev1.EventTypeWarning, api.ReasonLatchFailed, fmt.Sprintf("%s: %s", a.Reason, a.Message))
			c.cfg.Metrics.FailuresTotal.WithLabelValues(ns, name, string(a.Reason)).Inc()
		case latch.ActionProgressingIgnored:
			c.cfg.Metrics.ProgressingIgnored.WithLabelValues(ns, name).Inc()
		case latch.ActionPaused:
			if p := pausing.PauseNamed(pauses, a.Pause); p != nil {
				c.cfg.Metrics.PausesTotal.WithLabelValues(ns, name, p.EffectiveReason()).Inc()
			}
		case latch.ActionResumed:
			c.report.Event(stage, corev1.EventTypeNormal, api.ReasonStageResumed, resumedMessage(stage))
			c.cfg.Metrics.ResumesTotal.WithLabelValues(ns, name).Inc()
		case latch.ActionVerificationStarted, latch.ActionVerificationFinished, latch.ActionVerificationNotPickedUp, latch.ActionVerificationRunDeleted,
			latch.ActionAbortInKargo, latch.ActionVerificationLeftToKargo:
			c.verifier.ReportAction(stage, a)
		case latch.ActionCycleStarted, latch.ActionCreatePause, latch.ActionMarkVerified, latch.ActionStartVerification, latch.ActionTerminateRun,
			latch.ActionCutShortRun:
			// Kargo announces promotions itself; a new pause is reported
			// when it takes effect (Paused).
		}
	}
	if labelRestored {
		c.report.Event(stage, corev1.EventTypeWarning, api.ReasonPauseLabelRestored,
			fmt.Sprintf("Put back the %s label that was removed: StagePause %s still covers the Stage", api.PausedLabel, pauses[0].Name))
	}
}
