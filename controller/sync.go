package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// syncStage steps one Stage's latch and carries out what the step asks for,
// in an order that survives a crash at any point:
//
//  1. a failure's pause, which must not be lost, is made first,
//     idempotently;
//  2. then the Stage's record, paused label and refresh request are stored
//     in one patch, conditional on the resourceVersion they were computed
//     from, so a stale or outdated view is retried rather than stored; the
//     StagePaused Event and the drain are made at the same time (see
//     announcement and drainAlong);
//  3. then the remaining Events and metrics are reported.
//
// Nothing is written when nothing changed.
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
	// The record, inflated once for the whole sync (see kargo.Packed).
	stage, value, err := c.recordOf(ctx, key, stage, m)
	if stage == nil || err != nil {
		return 0, err
	}
	if c.leftAlone(stage, value, m) {
		// This version cannot tell whether that record shows a resume; it
		// will never judge the Stage, so it holds none of its pauses.
		return 0, c.releasePauses(ctx, c.heldPauses(stage))
	}
	settings, problem := settingsFor(stage.Annotations, c.cfg.Defaults)
	c.reportConfig(stage, m, problem)
	pauses, held := c.coveringPauses(key.Namespace, key.Name), c.heldPauses(stage)

	now := c.clock.Now()
	res, obs := c.step(stage, value, m, settings, pauses, held, now)
	if hasAction(res, latch.ActionCreatePause) && !c.cfg.DryRun {
		// A pause is made from this judgement before the record is stored.
		// A cache that does not yet show this replica's last write may hold
		// a record older than a failure already paused and resumed: judge
		// again on the Stage as it is on the server.
		if !m.writtenState.matches(value) {
			if m.replacedVersion != "" && stage.ResourceVersion == m.replacedVersion {
				// Behind for sure: the event of that store brings a sync
				// on the Stage as it is now.
				logger.V(4).Info("Cache is behind this replica's last store; waiting for its event")
				return 0, nil
			}
			if stage, err = c.liveStage(ctx, key); stage == nil || err != nil {
				return 0, err
			}
			if value, err = stage.State.Read(); err != nil {
				return 0, err
			}
			if c.leftAlone(stage, value, m) {
				return 0, nil
			}
		}
		if res, _ = c.step(stage, value, m, settings, pauses, held, now); hasAction(res, latch.ActionCreatePause) {
			// Make the pause, and let this same sync see it: the Stage is
			// labeled and the pause takes effect without waiting for the
			// informer to deliver it. A pause found deleted was resumed.
			if pauses, held, err = c.createFailurePauses(ctx, stage, res, pauses, held); err != nil {
				return 0, err
			}
		}
		res, obs = c.step(stage, value, m, settings, pauses, held, now)
	} else if hasAction(res, latch.ActionCreatePause) {
		c.reportDryRunPauses(ctx, stage, res)
	}
	var reads *markReads
	if m.mayTryMark(res.Record.Cycle(), now) && latch.MarkDue(settings, res.Record, obs, now) {
		// The Freight of this latch will be marked once the latch is
		// stored: read what the mark rests on meanwhile.
		reads = c.startMarkReads(ctx, key.Namespace, key.Name, obs.FreightNames)
		defer func() { <-reads.done }()
	}
	drained := c.drainAlong(ctx, stage, m, settings, pauses, res)
	announced := c.announce(ctx, stage, m, c.owedAnnouncement(stage, value, m, pauses, res))
	stored, restored, err := c.store(ctx, stage, value, m, res)
	drainErr := drained()
	if err != nil {
		_ = announced()
		if drainErr != nil {
			logger.Error(drainErr, "Draining the Stage's queued auto-promotions failed too; retrying with the store")
		}
		return 0, err
	}
	c.afterStore(stage, pauses, res, restored)
	m.health = obs.Health
	// The record that shows their resume is stored (or was already). An
	// Event the API refused holds back neither this nor the mark: the
	// announcement is retried on its own (see announce).
	announceErr := announced()
	if err := c.releasePauses(ctx, held); err != nil {
		return 0, err
	}
	if reads != nil {
		if err := c.markPass(ctx, key, stored, m, settings, now, reads); err != nil {
			return 0, err
		}
	}
	if announceErr != nil {
		return 0, announceErr
	}
	if drainErr != nil {
		return 0, drainErr
	}
	statusCheck := c.checkStatus(stage, m, now)
	if res.RequeueAfter > 0 {
		logger.V(4).Info("Time-based transition pending", "phase", res.Record.Phase, "after", res.RequeueAfter)
	}
	return earliest(earliest(res.RequeueAfter, statusCheck), c.markRetry(m, now)), nil
}

// markRetry says when a Stage whose marking was refused should try again.
func (c *Controller) markRetry(m *memo, now time.Time) time.Duration {
	if now.Before(m.markRetryAt) {
		return m.markRetryAt.Sub(now)
	}
	return 0
}

// step reads the record and the Stage's status and steps the machine.
func (c *Controller) step(stage *kargo.Stage, value string, m *memo, settings latch.Settings, pauses, held []*v1alpha1.StagePause, now time.Time) (latch.Result, latch.Observation) {
	obs := c.observe(stage, m, pauses)
	for _, p := range held {
		obs.Deleted = append(obs.Deleted, p.Name)
	}
	if !stage.State.Present() {
		created := stage.CreationTimestamp.Time
		obs.CreatedWithoutRecord = &created
	}
	return latch.Step(settings, c.priorRecord(stage, value, m), obs, now), obs
}

// observe turns a Stage and the pauses covering it into the machine's
// observation, reporting unusable input once.
func (c *Controller) observe(stage *kargo.Stage, m *memo, pauses []*v1alpha1.StagePause) latch.Observation {
	obs, unknownHealth := observe(stage, m.health)
	c.reportHealth(stage, m, unknownHealth)
	c.reportApps(stage, m, len(obs.Apps))
	for _, p := range pauses {
		obs.Pauses = append(obs.Pauses, p.Name)
		if obs.PauseUIDs == nil {
			obs.PauseUIDs = make(map[string]string, len(pauses))
		}
		obs.PauseUIDs[p.Name] = string(p.UID)
	}
	return obs
}

// liveStage reads a Stage from the API server; nil when it is gone, or has
// left this operator's shard (its label changed, and the cache has not
// heard yet): the operator of its new shard judges it.
func (c *Controller) liveStage(ctx context.Context, key cache.ObjectName) (*kargo.Stage, error) {
	u, err := c.cfg.Dynamic.Resource(kargo.StagesResource).Namespace(key.Namespace).Get(ctx, key.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !c.servesLabels(u.GetLabels()) {
		klog.FromContext(ctx).V(2).Info("Stage has left this shard; leaving it to its new shard's operator")
		return nil, nil
	}
	return kargo.StageFromUnstructured(u), nil
}

var phaseNames = func() []string {
	names := make([]string, len(latch.Phases))
	for i, p := range latch.Phases {
		names[i] = string(p)
	}
	return names
}()

// leftAlone reports whether the Stage's record was written by a newer
// kargo-latch (an upgrade rolled back, or two versions side by side): this
// one then touches nothing of the Stage, and says so once.
func (c *Controller) leftAlone(stage *kargo.Stage, value string, m *memo) bool {
	newer := latch.NewerVersion(value)
	if newer == nil {
		return false
	}
	if warnOnce(&m.badState, value) {
		c.report.Warn(stage, api.ReasonNewerState, "Leaving the Stage alone: its %s annotation was written by a newer kargo-latch (%v); run that version, or delete the annotation to start over", api.StateAnnotation, newer)
		c.cfg.Metrics.InvalidInput.WithLabelValues(stage.Namespace, stage.Name, "state_version").Inc()
	}
	return true
}

// priorRecord decodes the Stage's record. Garbage is reported once and
// treated as no record: the machine starts over from the Stage's status,
// and the store that writes the fresh record keeps the garbage, or its
// beginning, beside it (see store and keptGarbage).
func (c *Controller) priorRecord(stage *kargo.Stage, value string, m *memo) latch.Record {
	if c.cfg.DryRun && m.dryRunRecord != nil {
		return *m.dryRunRecord
	}
	r, err := latch.Decode(value)
	if err != nil {
		if warnOnce(&m.badState, value) {
			c.report.Warn(stage, api.ReasonInvalidState, "Ignoring the %s annotation and starting over from the Stage's status (%v); %s",
				api.StateAnnotation, err, c.garbageReport(value))
			c.cfg.Metrics.InvalidInput.WithLabelValues(stage.Namespace, stage.Name, "state").Inc()
		}
		return latch.Record{}
	}
	return r
}

// store writes, in one merge patch of the Stage's metadata, whatever of
// these differs from the Stage: the record annotation, the paused label, and
// on resume a Kargo refresh request. The patch carries the resourceVersion
// the record was computed from: if the Stage changed meanwhile, or the cache
// was stale, it conflicts and the sync is retried from fresh data. It
// returns the Stage as stored (nil when nothing was written), and reports
// whether it put back a paused label someone removed.
func (c *Controller) store(ctx context.Context, stage *kargo.Stage, value string, m *memo, res latch.Result) (stored *kargo.Stage, restored bool, err error) {
	if c.cfg.DryRun {
		m.dryRunRecord = &res.Record
		return nil, false, nil
	}
	annotations := map[string]any{}
	labels := map[string]any{}
	encoded := res.Record.Encode()
	garbage := false
	if encoded != value {
		annotations[api.StateAnnotation] = encoded
		if _, err := latch.Decode(value); err != nil {
			// A garbage record (priorRecord) is not simply overwritten: a
			// person may mend it from there. A newer version's record is
			// never replaced (leftAlone).
			annotations[kargo.InvalidStateAnnotation], _ = keptGarbage(value)
			garbage = true
		}
	}
	wantPaused := len(res.Record.Pauses) > 0
	if hasPaused := stage.Labels[api.PausedLabel] == "true"; hasPaused != wantPaused {
		if wantPaused {
			labels[api.PausedLabel] = "true"
			restored = !hasAction(res, latch.ActionPaused)
		} else {
			labels[api.PausedLabel] = nil
		}
	}
	if hasAction(res, latch.ActionResumed) {
		// Kargo re-attempts auto-promotion at once instead of at its next
		// periodic pass, five minutes away.
		annotations[kargo.RefreshAnnotation] = c.clock.Now().UTC().Format(time.RFC3339Nano)
	}
	if len(annotations) == 0 && len(labels) == 0 {
		return nil, false, nil
	}
	// Until the cache shows this record, or whatever a failed write left,
	// it may be behind the server.
	m.writtenState, m.replacedVersion = digestOf(encoded), ""
	stored, err = c.patchMetadata(ctx, stage, annotations, labels)
	if err != nil && garbage && annotationsTooLong(err) {
		stored, err = c.storeWithoutGarbage(ctx, stage, value, annotations, labels, err)
	}
	if err != nil {
		return nil, false, fmt.Errorf("writing the Stage's latch record: %w", err)
	}
	if stored.ResourceVersion != stage.ResourceVersion {
		// Only a write that moved the Stage on leaves its old version
		// behind in the cache; a no-op one would name the current version.
		m.replacedVersion = stage.ResourceVersion
	}
	klog.FromContext(ctx).V(2).Info("Stored latch record", "phase", res.Record.Phase, "pauses", res.Record.Pauses)
	return stored, restored, nil
}

// patchMetadata writes annotations and labels (nil values remove keys) in
// one merge patch of the Stage's metadata, conditional on the Stage's
// resourceVersion.
func (c *Controller) patchMetadata(ctx context.Context, stage *kargo.Stage, annotations, labels map[string]any) (*kargo.Stage, error) {
	md := map[string]any{"resourceVersion": stage.ResourceVersion}
	if len(annotations) > 0 {
		md["annotations"] = annotations
	}
	if len(labels) > 0 {
		md["labels"] = labels
	}
	patch, err := json.Marshal(map[string]any{"metadata": md})
	if err != nil {
		return nil, err
	}
	u, err := c.cfg.Dynamic.Resource(kargo.StagesResource).Namespace(stage.Namespace).
		Patch(ctx, stage.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: api.FieldManager})
	if err != nil {
		return nil, err
	}
	return kargo.StageFromUnstructured(u), nil
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
		c.report.Warn(stage, api.ReasonStatusMissing, "Stage has no status %s after its creation: Kargo has not reconciled it; kargo-latch keeps it Idle", c.cfg.StatusMissingAfter)
		c.cfg.Metrics.InvalidInput.WithLabelValues(stage.Namespace, stage.Name, "status").Inc()
	}
	return 0
}

func hasAction(res latch.Result, kind latch.ActionKind) bool {
	_, ok := actionOf(res, kind)
	return ok
}

func actionOf(res latch.Result, kind latch.ActionKind) (latch.Action, bool) {
	for _, a := range res.Actions {
		if a.Kind == kind {
			return a, true
		}
	}
	return latch.Action{}, false
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
