package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// drainAlong drains the queued auto-promotions of a Stage becoming paused,
// when asked to, concurrently with the caller's store of the record that
// says it is paused; the returned function waits for it. The drain's live
// read and its aborts would otherwise stand between a failure and the
// Stage's label: a pause would cost three round trips to the API server
// instead of two (the StagePause, then the label). Either order survives a
// crash or a refused write: the drain is idempotent, so a sync whose store
// failed repeats it; a record stored without its drain is a paused Stage,
// whose syncs read live again until a live drain succeeds (a refused read
// or abort), or, after a restart, drain every queued auto-promotion the
// cache shows, which is all of them once its list is read.
// (A failure's pause is made before either, in syncStage; the StagePaused
// Event beside the store, in announce.)
func (c *Controller) drainAlong(ctx context.Context, stage *kargo.Stage, m *memo, settings latch.Settings, pauses []*v1alpha1.StagePause, res latch.Result) (wait func() error) {
	drain, live := c.drainFor(ctx, stage, m, settings, pauses, res)
	if drain == nil {
		return func() error { return nil }
	}
	done := make(chan error, 1)
	go func() { done <- drain() }()
	return func() error {
		err := <-done
		// A live drain that failed is owed until one succeeds: the
		// retry of a paused Stage would otherwise drain from the cache
		// alone, which may not show an auto-promotion made just before
		// the pause (a stalled watch).
		switch {
		case live != "" && err != nil:
			m.liveDrainOwed = live
		case live != "" && m.liveDrainOwed == live:
			m.liveDrainOwed = ""
		}
		return err
	}
}

// drainFor says what drain a sync owes, if any, and the pause whose live
// drain it is (empty when it drains from the cache). A Stage becoming
// paused, or whose live drain failed before, is drained from a live read of
// its Promotions; a Stage paused already, of what the cache shows: an
// auto-promotion queued and not yet asked to abort (an API server may admit
// one a moment after the pause, before its gate's own view of the pauses
// has it, or a Kargo running under an ungated identity may make one: see
// gatebypass.go; its event brought this sync), and one this operator asked
// to abort for a covering pause whose status.drained does not list it yet.
func (c *Controller) drainFor(ctx context.Context, stage *kargo.Stage, m *memo, settings latch.Settings, pauses []*v1alpha1.StagePause, res latch.Result) (drain func() error, live types.UID) {
	if !settings.DrainOnPause || len(pauses) == 0 {
		return nil, ""
	}
	var p *v1alpha1.StagePause
	if a, ok := actionOf(res, latch.ActionPaused); ok {
		p = pauseNamed(pauses, a.Pause)
	} else if m.liveDrainOwed != "" {
		if p = pauseWithUID(pauses, m.liveDrainOwed); p == nil {
			m.liveDrainOwed = "" // that pause is gone: nothing is owed to it
		}
	}
	if p != nil {
		return func() error {
			queued, err := c.stagePromotions(ctx, stage, p)
			if err != nil {
				return err
			}
			return c.drain(ctx, stage, p, queued)
		}, p.UID
	}
	if len(res.Record.Pauses) == 0 {
		return nil, ""
	}
	late := c.cachedUndrained(stage, pauses)
	if len(late) == 0 {
		return nil, ""
	}
	return func() error {
		for _, p := range pauses {
			if err := c.drain(ctx, stage, p, late[p.UID]); err != nil {
				return err
			}
		}
		return nil
	}, ""
}

// cachedUndrained sorts the Promotions of a paused Stage that the cache
// shows and a drain still owes by the covering pause to drain them for: one
// marked as this operator's abort for a pause not yet listing it, and an
// auto-promotion queued and not yet asked to abort, for the first pause.
func (c *Controller) cachedUndrained(stage *kargo.Stage, pauses []*v1alpha1.StagePause) map[types.UID][]*kargo.Promotion {
	var out map[types.UID][]*kargo.Promotion
	add := func(uid types.UID, p *kargo.Promotion) {
		if out == nil {
			out = map[types.UID][]*kargo.Promotion{}
		}
		out[uid] = append(out[uid], p)
	}
	for _, p := range c.cachedPromotions(stage) {
		if owner := pauseWithUID(pauses, drainedFor(p)); owner != nil {
			if !slices.Contains(owner.Status.Drained, p.Name) {
				add(owner.UID, p)
			}
			continue
		}
		if queuedAuto(p) && !abortAsked(p) {
			add(pauses[0].UID, p)
		}
	}
	return out
}

func pauseWithUID(pauses []*v1alpha1.StagePause, uid types.UID) *v1alpha1.StagePause {
	for _, p := range pauses {
		if uid != "" && p.UID == uid {
			return p
		}
	}
	return nil
}

// drainedFor is the UID of the pause a drain of this operator asked to
// abort p for; empty when none did.
func drainedFor(p *kargo.Promotion) types.UID {
	if !abortAsked(p) {
		return ""
	}
	return types.UID(p.Annotations[DrainedByAnnotation])
}

func abortAsked(p *kargo.Promotion) bool {
	_, asked := p.Annotations[kargo.AbortAnnotation]
	return asked
}

// cachedPromotions lists the Promotions the caches hold for the Stage: the
// unfinished ones, and those a drain aborted (promotionwatch.go).
func (c *Controller) cachedPromotions(stage *kargo.Stage) []*kargo.Promotion {
	var out []*kargo.Promotion
	for _, inf := range c.promotionInformersFor(stage.Namespace) {
		cached, err := inf.GetIndexer().ByIndex(promotionsByStage, stage.Namespace+"/"+stage.Name)
		if err != nil {
			continue // the index exists from the start: no error to tell
		}
		for _, o := range cached {
			if p, ok := o.(*kargo.Promotion); ok {
				out = append(out, p)
			}
		}
	}
	return out
}

// reportDryRunPauses says, in --dry-run, which StagePauses a step would
// create.
func (c *Controller) reportDryRunPauses(ctx context.Context, stage *kargo.Stage, res latch.Result) {
	for _, a := range res.Actions {
		if a.Kind == latch.ActionCreatePause {
			klog.FromContext(ctx).Info("Dry run: would create a StagePause", "pause", a.Pause, "reason", a.Reason)
			c.event(stage, corev1.EventTypeWarning, ReasonStagePaused, fmt.Sprintf("Dry run: would create StagePause %s (reason %s): %s", a.Pause, a.Reason, truncate(a.Message, 512)))
		}
	}
}

// afterStore reports the step's actions as Events and metrics.
func (c *Controller) afterStore(stage *kargo.Stage, pauses []*v1alpha1.StagePause, res latch.Result, labelRestored bool) {
	ns, name := stage.Namespace, stage.Name
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
			c.cfg.Metrics.FailuresTotal.WithLabelValues(ns, name, string(a.Reason)).Inc()
		case latch.ActionProgressingIgnored:
			c.cfg.Metrics.ProgressingIgnored.WithLabelValues(ns, name).Inc()
		case latch.ActionPaused:
			if p := pauseNamed(pauses, a.Pause); p != nil {
				c.cfg.Metrics.PausesTotal.WithLabelValues(ns, name, p.EffectiveReason()).Inc()
			}
		case latch.ActionResumed:
			c.event(stage, corev1.EventTypeNormal, ReasonStageResumed, resumedMessage(stage))
			c.cfg.Metrics.ResumesTotal.WithLabelValues(ns, name).Inc()
		case latch.ActionCycleStarted, latch.ActionCreatePause, latch.ActionMarkVerified:
			// Kargo announces promotions itself; a new pause is reported
			// when it takes effect (Paused).
		}
	}
	if labelRestored {
		c.event(stage, corev1.EventTypeWarning, ReasonPauseLabelRestored,
			fmt.Sprintf("Put back the %s label that was removed: StagePause %s still covers the Stage", PausedLabel, pauses[0].Name))
	}
}

func pauseNamed(pauses []*v1alpha1.StagePause, name string) *v1alpha1.StagePause {
	for _, p := range pauses {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// maxPauseMessage keeps a failure message within the CRD's limit.
const maxPauseMessage = 4096

// createFailurePauses creates the StagePauses a step asked for, and returns
// pauses with them added, sorted by name as coveringPauses sorts, and held
// with those found deleted and held for resume: their failure was judged
// before, and someone resumed it since.
func (c *Controller) createFailurePauses(ctx context.Context, stage *kargo.Stage, res latch.Result, pauses, held []*v1alpha1.StagePause) (covering, deleted []*v1alpha1.StagePause, err error) {
	covering, deleted = slices.Clone(pauses), slices.Clone(held)
	for _, a := range res.Actions {
		if a.Kind != latch.ActionCreatePause || pauseNamed(covering, a.Pause) != nil || pauseNamed(deleted, a.Pause) != nil {
			continue
		}
		p, err := c.createFailurePause(ctx, stage, a)
		switch {
		case err != nil:
			return nil, nil, err
		case p.HeldForResume():
			deleted = append(deleted, p)
		case p.DeletionTimestamp == nil:
			covering = append(covering, p)
		}
	}
	sortPauses(covering)
	sortPauses(deleted)
	return covering, deleted, nil
}

// createFailurePause creates the StagePause a failure asked for. Its name is
// derived from the failure, so creating it again finds it there.
func (c *Controller) createFailurePause(ctx context.Context, stage *kargo.Stage, a latch.Action) (*v1alpha1.StagePause, error) {
	msg := a.Message
	if len(msg) > maxPauseMessage {
		msg = msg[:maxPauseMessage]
	}
	p := &v1alpha1.StagePause{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "StagePause"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      a.Pause,
			Namespace: stage.Namespace,
			Labels:    map[string]string{v1alpha1.StageLabel: v1alpha1.StageLabelValue(stage.Name), v1alpha1.ReasonLabel: string(a.Reason)},
			// Deleting the Stage deletes the pauses its failures made.
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: kargo.GroupVersion.String(), Kind: "Stage", Name: stage.Name, UID: stage.UID,
			}},
			Finalizers: []string{v1alpha1.ResumeFinalizer},
		},
		Spec: v1alpha1.StagePauseSpec{Stage: stage.Name, Reason: string(a.Reason), Message: msg},
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(p)
	if err != nil {
		return nil, err
	}
	delete(obj, "status")
	client := c.cfg.Dynamic.Resource(v1alpha1.StagePausesResource).Namespace(stage.Namespace)
	u, err := client.Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{FieldManager: FieldManager})
	if apierrors.IsAlreadyExists(err) {
		u, err = client.Get(ctx, a.Pause, metav1.GetOptions{})
	} else if err == nil {
		klog.FromContext(ctx).Info("Paused the Stage after a failure", "pause", a.Pause, "reason", a.Reason)
	}
	if err != nil {
		return nil, fmt.Errorf("creating StagePause %s: %w", a.Pause, err)
	}
	created := &v1alpha1.StagePause{}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, created); err != nil {
		return nil, err
	}
	return created, nil
}

// pausedEvent records StagePaused exactly once per pause: the one mark
// names, p when it still exists.
func (c *Controller) pausedEvent(ctx context.Context, stage *kargo.Stage, mark latch.PauseMark, p *v1alpha1.StagePause) error {
	msg := fmt.Sprintf("Paused by StagePause %s (deleted since)", mark.Name)
	if p != nil {
		msg = fmt.Sprintf("Paused by StagePause %s (reason %s)", p.Name, p.EffectiveReason())
		if p.Spec.Message != "" {
			msg += ": " + truncate(p.Spec.Message, 1024)
		}
	}
	return c.eventOnce(ctx, stage, eventName(stage, "paused", mark.UID+"\x00"+mark.Name), corev1.EventTypeWarning, ReasonStagePaused, msg)
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
		Source:         corev1.EventSource{Component: FieldManager},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	_, err := c.cfg.Kube.CoreV1().Events(stage.Namespace).Create(ctx, ev, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("recording %s: %w", reason, err)
	}
	return nil
}

// drain aborts the queued auto-promotions among queued (read when the Stage
// became paused, or seen later while it is), and lists them in the pause's
// status.drained. A Promotion runs only when
// it is Pending and Kargo's auto-promotion made it; Running Promotions and
// people's Promotions are never touched.
func (c *Controller) drain(ctx context.Context, stage *kargo.Stage, pause *v1alpha1.StagePause, queued []*kargo.Promotion) error {
	var drained []string
	for _, p := range queued {
		mine := drainedFor(p) == pause.UID
		if !mine && (!queuedAuto(p) || abortAsked(p)) {
			// Running, a person's, finished, or aborted by someone else
			// (a person, or a drain for another pause).
			continue
		}
		if c.cfg.DryRun {
			drained = append(drained, p.Name)
			continue
		}
		aborted, err := c.abort(ctx, p, pause)
		if err != nil {
			return err
		}
		if aborted {
			drained = append(drained, p.Name)
		}
	}
	if len(drained) == 0 {
		return nil
	}
	slices.Sort(drained)
	if c.cfg.DryRun {
		klog.FromContext(ctx).Info("Dry run: would abort queued auto-promotions", "pause", pause.Name, "promotions", drained)
		c.event(stage, corev1.EventTypeNormal, ReasonPromotionDrained,
			fmt.Sprintf("Dry run: would abort %d queued auto-promotion(s) as StagePause %s takes effect: %s", len(drained), pause.Name, strings.Join(drained, ", ")))
		return nil
	}
	added, err := c.addDrained(ctx, pause, drained)
	if err != nil || len(added) == 0 {
		// Reported by the sync that recorded them: a retry does not repeat
		// it. Until then, the abort's mark keeps them owed (drainFor).
		return err
	}
	c.event(stage, corev1.EventTypeNormal, ReasonPromotionDrained,
		fmt.Sprintf("Aborted %d queued auto-promotion(s) as StagePause %s took effect: %s", len(added), pause.Name, strings.Join(added, ", ")))
	return nil
}

// abort asks Kargo to abort a queued auto-promotion, conditional on the
// Promotion as read: if it changed since (it started running, or an earlier
// try of this drain aborted it already, which a read shared by several
// drains does not show), it is read again and judged on that. It reports
// whether the Promotion is aborted (false when it is gone or no longer
// queued).
func (c *Controller) abort(ctx context.Context, p *kargo.Promotion, pause *v1alpha1.StagePause) (bool, error) {
	client := c.cfg.Dynamic.Resource(kargo.PromotionsResource).Namespace(p.Namespace)
	for range 3 {
		if abortAsked(p) {
			return drainedFor(p) == pause.UID, nil
		}
		if !queuedAuto(p) {
			return false, nil
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{
			"resourceVersion": p.ResourceVersion,
			"annotations":     map[string]string{kargo.AbortAnnotation: "terminate", DrainedByAnnotation: string(pause.UID)},
		}})
		_, err := client.Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager})
		switch {
		case err == nil:
			return true, nil
		case apierrors.IsNotFound(err):
			return false, nil
		case !apierrors.IsConflict(err):
			return false, fmt.Errorf("aborting queued Promotion %s: %w", p.Name, err)
		}
		u, err := client.Get(ctx, p.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("reading queued Promotion %s: %w", p.Name, err)
		}
		p = kargo.PromotionFromUnstructured(u)
	}
	return false, fmt.Errorf("aborting queued Promotion %s: it keeps changing", p.Name)
}

// stagePromotions lists a Stage's Promotions from the API server, not the
// cache: one created a moment before the pause, not yet delivered to the
// informer, must not escape the drain. Kargo's webhook labels every
// Promotion with its Stage, so one label-filtered LIST reads them; the
// drains of a project-wide pause share one read of the project instead
// (drainlist.go). Cached ones the read missed are added.
func (c *Controller) stagePromotions(ctx context.Context, stage *kargo.Stage, pause *v1alpha1.StagePause) ([]*kargo.Promotion, error) {
	var out []*kargo.Promotion
	switch {
	case pause.Spec.Stage == v1alpha1.AllStages:
		shared, err := c.queuedAutoPromotions(ctx, pause, stage.Name)
		if err != nil {
			return nil, err
		}
		out = append(out, shared...)
	case len(validation.IsValidLabelValue(stage.Name)) == 0:
		// A name too long for a label value (over 63) cannot be Kargo's
		// label either: such a Stage's Promotions are known from the cache.
		list, err := c.cfg.Dynamic.Resource(kargo.PromotionsResource).Namespace(stage.Namespace).
			List(ctx, metav1.ListOptions{LabelSelector: kargo.StageLabel + "=" + stage.Name})
		if err != nil {
			return nil, fmt.Errorf("listing the Stage's Promotions: %w", err)
		}
		for i := range list.Items {
			if p := kargo.PromotionFromUnstructured(&list.Items[i]); p.Stage == stage.Name {
				out = append(out, p)
			}
		}
	}
	seen := map[string]bool{}
	for _, p := range out {
		seen[p.Name] = true
	}
	for _, p := range c.cachedPromotions(stage) {
		if !seen[p.Name] {
			out = append(out, p)
		}
	}
	return out, nil
}

// addDrained adds names to a pause's status.drained. Several Stages can
// drain into one project-wide pause at once, so it reads the pause fresh
// and writes conditionally.
func (c *Controller) addDrained(ctx context.Context, pause *v1alpha1.StagePause, names []string) (added []string, err error) {
	client := c.cfg.Dynamic.Resource(v1alpha1.StagePausesResource).Namespace(pause.Namespace)
	for range 5 {
		u, err := client.Get(ctx, pause.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		have, _, _ := unstructured.NestedStringSlice(u.Object, "status", "drained")
		added = nil
		for _, n := range names {
			if !slices.Contains(have, n) {
				added = append(added, n)
			}
		}
		if len(added) == 0 {
			return nil, nil
		}
		all := append(slices.Clone(have), added...)
		slices.Sort(all)
		all = slices.Compact(all)
		patch, _ := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": u.GetResourceVersion()},
			"status":   map[string]any{"drained": all},
		})
		_, err = client.Patch(ctx, pause.Name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: FieldManager}, "status")
		if err == nil {
			return added, nil
		}
		if !apierrors.IsConflict(err) {
			return nil, fmt.Errorf("recording drained Promotions on StagePause %s: %w", pause.Name, err)
		}
		// The drains of a project-wide pause's other Stages, or its status
		// sync, wrote it meanwhile: read it again.
	}
	return nil, fmt.Errorf("recording drained Promotions on StagePause %s: it keeps changing", pause.Name)
}

// reportConfig warns once per new invalid-settings message.
func (c *Controller) reportConfig(stage *kargo.Stage, m *memo, problem string) {
	if warnOnce(&m.configProblem, problem) {
		c.warn(stage, ReasonInvalidConfig, "Invalid setting: %s", problem)
		c.cfg.Metrics.InvalidConfig.WithLabelValues(stage.Namespace, stage.Name).Inc()
	}
}

// reportHealth warns once per new health string Kargo does not define.
func (c *Controller) reportHealth(stage *kargo.Stage, m *memo, unknown string) {
	if warnOnce(&m.badHealth, unknown) {
		c.warn(stage, ReasonUnknownHealth, "Stage health %q is not one Kargo defines; the latch holds its phase until Kargo reports a known health", unknown)
		c.cfg.Metrics.InvalidInput.WithLabelValues(stage.Namespace, stage.Name, "health").Inc()
	}
}

// reportApps warns once when a Stage lists more Applications than the
// per-App latch handles; its aggregate health alone then counts.
func (c *Controller) reportApps(stage *kargo.Stage, m *memo, apps int) {
	tooMany := apps > latch.MaxApps
	if tooMany && !m.tooManyApps {
		c.warn(stage, ReasonTooManyApps, "Stage lists more than %d Applications in its health output; kargo-latch latches it on the Stage's aggregate health alone", latch.MaxApps)
		c.cfg.Metrics.InvalidInput.WithLabelValues(stage.Namespace, stage.Name, "apps").Inc()
	}
	m.tooManyApps = tooMany
}

// warnOnce remembers value in last and reports whether it is a new problem
// to report: not empty, and not the one reported last time.
func warnOnce(last *string, value string) bool {
	if value == *last {
		return false
	}
	*last = value
	return value != ""
}

func (c *Controller) warn(stage *kargo.Stage, reason, format string, args ...any) {
	c.event(stage, corev1.EventTypeWarning, reason, fmt.Sprintf(format, args...))
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
