package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// afterStore reports the step's actions as Events and metrics.
func (c *Controller) afterStore(stage *kargo.Stage, pauses []*v1alpha1.StagePause, res latch.Result, labelRestored bool) {
	ns, name := stage.Namespace, stage.Name
	for _, a := range res.Actions {
		switch a.Kind {
		case latch.ActionLatched:
			c.event(stage, corev1.EventTypeNormal, api.ReasonHealthLatched, a.Message)
			if a.TimeToLatch > 0 {
				c.cfg.Metrics.TimeToLatch.Observe(a.TimeToLatch.Seconds())
			}
		case latch.ActionDegraded:
			c.event(stage, corev1.EventTypeWarning, api.ReasonStageDegraded, a.Message)
		case latch.ActionRecovered:
			c.event(stage, corev1.EventTypeNormal, api.ReasonStageRecovered, a.Message)
		case latch.ActionFailed:
			c.event(stage, corev1.EventTypeWarning, api.ReasonLatchFailed, fmt.Sprintf("%s: %s", a.Reason, a.Message))
			c.cfg.Metrics.FailuresTotal.WithLabelValues(ns, name, string(a.Reason)).Inc()
		case latch.ActionProgressingIgnored:
			c.cfg.Metrics.ProgressingIgnored.WithLabelValues(ns, name).Inc()
		case latch.ActionPaused:
			if p := pauseNamed(pauses, a.Pause); p != nil {
				c.cfg.Metrics.PausesTotal.WithLabelValues(ns, name, p.EffectiveReason()).Inc()
			}
		case latch.ActionResumed:
			c.event(stage, corev1.EventTypeNormal, api.ReasonStageResumed, resumedMessage(stage))
			c.cfg.Metrics.ResumesTotal.WithLabelValues(ns, name).Inc()
		case latch.ActionCycleStarted, latch.ActionCreatePause, latch.ActionMarkVerified:
			// Kargo announces promotions itself; a new pause is reported
			// when it takes effect (Paused).
		}
	}
	if labelRestored {
		c.event(stage, corev1.EventTypeWarning, api.ReasonPauseLabelRestored,
			fmt.Sprintf("Put back the %s label that was removed: StagePause %s still covers the Stage", api.PausedLabel, pauses[0].Name))
	}
}

// eventName derives an Event's name from the Stage, kind and identity, so
// that an effect repeated after a crash finds its Event instead of sending a
// second one.
func eventName(stage *kargo.Stage, kind, identity string) string {
	sum := sha256.Sum256([]byte(string(stage.UID) + "\x00" + identity))
	prefix := stage.Name
	if len(prefix) > 200 {
		prefix = prefix[:200]
	}
	return prefix + "." + kind + "." + hex.EncodeToString(sum[:8])
}

// eventOnce records an Event about a Stage under a name from eventName. It
// is written directly, not through the asynchronous recorder, which could
// lose it in a crash.
func (c *Controller) eventOnce(ctx context.Context, stage *kargo.Stage, name, eventType, reason, msg string) error {
	now := metav1.NewTime(c.clock.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: stage.Namespace},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: kargo.GroupVersion.String(), Kind: "Stage",
			Namespace: stage.Namespace, Name: stage.Name, UID: stage.UID,
		},
		Reason: reason, Message: truncate(msg, 1024), Type: eventType,
		Source:         corev1.EventSource{Component: api.FieldManager},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	_, err := c.cfg.Kube.CoreV1().Events(stage.Namespace).Create(ctx, ev, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("recording %s: %w", reason, err)
	}
	return nil
}

// event sends an Event about a Stage through the recorder (asynchronous,
// aggregated, best effort).
func (c *Controller) event(stage *kargo.Stage, eventType, reason, msg string) {
	ref := &corev1.ObjectReference{
		APIVersion: kargo.GroupVersion.String(), Kind: "Stage",
		Namespace: stage.Namespace, Name: stage.Name, UID: stage.UID,
	}
	c.recorder.Event(ref, eventType, reason, truncate(msg, 1024))
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
