package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// syncStage steps one Stage's latch. It writes the record only when it
// changed, and reports a transition only once its record is stored, so that
// a sync that fails or reads a stale cache is simply retried.
func (c *Controller) syncStage(ctx context.Context, key cache.ObjectName) (time.Duration, error) {
	start := c.clock.Now()
	defer func() { c.cfg.Metrics.ReconcileDuration.Observe(c.clock.Since(start).Seconds()) }()
	logger := klog.LoggerWithValues(klog.FromContext(ctx), "stage", klog.KRef(key.Namespace, key.Name))
	ctx = klog.NewContext(ctx, logger)

	stage, exists, err := c.stageByKey(key)
	if err != nil {
		return 0, err
	}
	if !exists {
		logger.V(4).Info("Stage is gone; forgetting it")
		c.memos.forget(key)
		c.cfg.Metrics.ForgetStage(key.Namespace, key.Name)
		return 0, nil
	}
	m := c.memos.get(key)
	now := c.clock.Now()

	settings, problem := settingsFor(stage.Annotations, c.cfg.Defaults)
	c.reportConfig(stage, m, problem)
	prior := c.priorRecord(stage, m)
	obs, unknownHealth := observe(stage, m.health)
	c.reportHealth(stage, m, unknownHealth)
	statusCheck := c.checkStatus(stage, m, now)

	res := latch.Step(settings, prior, obs, now)
	if err := c.storeRecord(ctx, stage, m, res.Record); err != nil {
		return 0, err
	}
	c.reportActions(stage, res)
	m.health = obs.Health
	c.cfg.Metrics.SetPhase(key.Namespace, key.Name, string(res.Record.Phase), phaseNames)
	if res.RequeueAfter > 0 {
		logger.V(4).Info("Time-based transition pending", "phase", res.Record.Phase, "after", res.RequeueAfter)
	}
	return earliest(res.RequeueAfter, statusCheck), nil
}

var phaseNames = func() []string {
	names := make([]string, len(latch.Phases))
	for i, p := range latch.Phases {
		names[i] = string(p)
	}
	return names
}()

// priorRecord decodes the Stage's record. Garbage is reported once and
// treated as no record: the machine starts over from the Stage's status.
func (c *Controller) priorRecord(stage *kargo.Stage, m *memo) latch.Record {
	if c.cfg.DryRun && m.dryRunRecord != nil {
		return *m.dryRunRecord
	}
	value := stage.Annotations[StateAnnotation]
	r, err := latch.Decode(value)
	if err != nil {
		if m.badState != value {
			m.badState = value
			c.warn(stage, ReasonInvalidState, "Ignoring the %s annotation and starting over from the Stage's status: %v", StateAnnotation, err)
			c.cfg.Metrics.InvalidInput.WithLabelValues(stage.Namespace, stage.Name, "state").Inc()
		}
		return latch.Record{}
	}
	return r
}

// storeRecord writes the record annotation, and nothing else, when it
// differs from the Stage's. The patch carries the resourceVersion the record
// was computed from: if the Stage changed meanwhile, or the cache was stale,
// the write conflicts and the sync is retried from fresh data.
func (c *Controller) storeRecord(ctx context.Context, stage *kargo.Stage, m *memo, r latch.Record) error {
	encoded := r.Encode()
	if c.cfg.DryRun {
		m.dryRunRecord = &r
		return nil
	}
	if encoded == stage.Annotations[StateAnnotation] {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": stage.ResourceVersion,
		"annotations":     map[string]string{StateAnnotation: encoded},
	}})
	if err != nil {
		return err
	}
	_, err = c.cfg.Dynamic.Resource(kargo.StagesResource).Namespace(stage.Namespace).
		Patch(ctx, stage.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
	if err != nil {
		return fmt.Errorf("writing the latch record: %w", err)
	}
	klog.FromContext(ctx).V(2).Info("Stored latch record", "phase", r.Phase)
	return nil
}

// checkStatus reports a Stage that still has no status once it is older
// than StatusMissingAfter, and otherwise says when to look again.
func (c *Controller) checkStatus(stage *kargo.Stage, m *memo, now time.Time) time.Duration {
	if stage.Status != nil {
		m.statusMissing = false
		return 0
	}
	if wait := stage.CreationTimestamp.Add(c.cfg.StatusMissingAfter).Sub(now); wait > 0 {
		return wait
	}
	if !m.statusMissing {
		m.statusMissing = true
		c.warn(stage, ReasonStatusMissing, "Stage has no status %s after its creation: Kargo has not reconciled it; kargo-latch keeps it Idle", c.cfg.StatusMissingAfter)
		c.cfg.Metrics.InvalidInput.WithLabelValues(stage.Namespace, stage.Name, "status").Inc()
	}
	return 0
}

func (c *Controller) reportConfig(stage *kargo.Stage, m *memo, problem string) {
	if problem == m.configProblem {
		return
	}
	m.configProblem = problem
	if problem == "" {
		return
	}
	c.warn(stage, ReasonInvalidConfig, "Invalid setting: %s", problem)
	c.cfg.Metrics.InvalidConfig.WithLabelValues(stage.Namespace, stage.Name).Inc()
}

func (c *Controller) reportHealth(stage *kargo.Stage, m *memo, unknown string) {
	if unknown == m.badHealth {
		return
	}
	m.badHealth = unknown
	if unknown == "" {
		return
	}
	c.warn(stage, ReasonUnknownHealth, "Stage health %q is not one Kargo defines; the latch holds its phase until Kargo reports a known health", unknown)
	c.cfg.Metrics.InvalidInput.WithLabelValues(stage.Namespace, stage.Name, "health").Inc()
}

// reportActions turns the machine's actions into Events and metrics.
func (c *Controller) reportActions(stage *kargo.Stage, res latch.Result) {
	for _, a := range res.Actions {
		switch a.Kind {
		case latch.ActionLatched:
			c.event(stage, corev1.EventTypeNormal, ReasonHealthLatched, a.Message)
			if a.TimeToLatch > 0 {
				c.cfg.Metrics.TimeToLatch.Observe(a.TimeToLatch.Seconds())
			}
		case latch.ActionDegraded:
			c.event(stage, corev1.EventTypeWarning, ReasonStageDegraded, a.Message)
		case latch.ActionRecovered:
			c.event(stage, corev1.EventTypeNormal, ReasonStageRecovered, a.Message)
		case latch.ActionFailed:
			c.event(stage, corev1.EventTypeWarning, ReasonLatchFailed, fmt.Sprintf("%s: %s", a.Reason, a.Message))
			c.cfg.Metrics.FailuresTotal.WithLabelValues(stage.Namespace, stage.Name, string(a.Reason)).Inc()
		case latch.ActionProgressingIgnored:
			c.cfg.Metrics.ProgressingIgnored.WithLabelValues(stage.Namespace, stage.Name).Inc()
		case latch.ActionCycleStarted:
			// Kargo announces promotions itself; nothing to add.
		}
	}
}

func (c *Controller) warn(stage *kargo.Stage, reason, format string, args ...any) {
	c.event(stage, corev1.EventTypeWarning, reason, fmt.Sprintf(format, args...))
}

func (c *Controller) event(stage *kargo.Stage, eventType, reason, msg string) {
	ref := &corev1.ObjectReference{
		APIVersion: kargo.GroupVersion.String(), Kind: "Stage",
		Namespace: stage.Namespace, Name: stage.Name, UID: stage.UID,
	}
	c.recorder.Event(ref, eventType, reason, msg)
}

// earliest is the sooner of two requeue delays, where zero means none.
func earliest(a, b time.Duration) time.Duration {
	switch {
	case a <= 0:
		return b
	case b <= 0:
		return a
	}
	return min(a, b)
}
