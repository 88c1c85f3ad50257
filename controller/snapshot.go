package controller

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// snapshot is what one sync knows of a Stage when it judges: the Stage from
// the cache (or from the API server when the cache may be behind), its
// record, the memo, the pauses covering it and those held for its resume,
// and its settings, all read and checked once. Input that cannot be used is
// reported as it is read (a Warning and a metric, once per new problem), so
// that judging it is pure.
type snapshot struct {
	key   cache.ObjectName
	stage *kargo.Stage
	memo  *memo
	now   time.Time
	// value is the record as stored; prior is what it decodes to (the
	// zero record when it is garbage, which garbage says).
	value   string
	prior   latch.Record
	garbage bool
	// leftAlone: a newer kargo-latch wrote the record; this one judges
	// nothing of the Stage (see leftAlone).
	leftAlone bool
	dryRun    bool

	settings latch.Settings
	pauses   []*v1alpha1.StagePause // in force and covering the Stage
	held     []*v1alpha1.StagePause // this operator's failure pauses, deleted and held for resume
	// promotions are the cached Promotions of a paused Stage that drains
	// (for the drain of late auto-promotions); nil otherwise.
	promotions []*kargo.Promotion
	obs        latch.Observation
}

// read takes a snapshot of the Stage named key from the caches. It returns
// nil when there is nothing to judge: the Stage is gone (and forgotten), or
// has left this shard.
func (c *Controller) read(ctx context.Context, key cache.ObjectName) (*snapshot, error) {
	stage, exists, err := c.stageByKey(key)
	if err != nil {
		return nil, err
	}
	if !exists {
		klog.FromContext(ctx).V(4).Info("Stage is gone; forgetting it")
		c.memos.forget(key)
		c.cfg.Metrics.ForgetStage(key.Namespace, key.Name)
		return nil, nil
	}
	m := c.memos.get(key)
	// The record, inflated once for the whole sync (see kargo.Packed).
	stage, value, err := c.recordOf(ctx, key, stage, m)
	if stage == nil || err != nil {
		return nil, err
	}
	s := c.snapshotOf(key, stage, value, m, c.coveringPauses(key.Namespace, key.Name), c.heldPauses(stage), nil)
	if err := c.readRecordedPauses(ctx, s); err != nil {
		return nil, err
	}
	if err := c.observeRuns(ctx, s); err != nil {
		return nil, err
	}
	return s, nil
}

// refresh takes the snapshot again from the Stage as it is on the API
// server. A failure's pause is made from a judgement before the record is
// stored, and a cache that does not yet show this replica's last write may
// hold a record older than a failure already paused and resumed. It returns
// nil when the cache is behind for sure: the event of that store brings a
// sync on the Stage as it is now.
func (c *Controller) refresh(ctx context.Context, s *snapshot) (*snapshot, error) {
	m := s.memo
	if m.writtenState.matches(s.value) {
		return s, nil
	}
	if m.replacedVersion != "" && s.stage.ResourceVersion == m.replacedVersion {
		klog.FromContext(ctx).V(4).Info("Cache is behind this replica's last store; waiting for its event")
		return nil, nil
	}
	stage, err := c.liveStage(ctx, s.key)
	if stage == nil || err != nil {
		return nil, err
	}
	value, err := stage.State.Read()
	if err != nil {
		return nil, err
	}
	fresh := c.snapshotOf(s.key, stage, value, m, s.pauses, s.held, &s.settings)
	// The live record may name a pause the cache lacks (the last leader's,
	// or one whose store's answer was lost): read it too, or the fresh
	// judgement would resume the Stage.
	if err := c.readRecordedPauses(ctx, fresh); err != nil {
		return nil, err
	}
	if err := c.observeRuns(ctx, fresh); err != nil {
		return nil, err
	}
	return fresh, nil
}

// snapshotOf checks what was read of a Stage and reports what cannot be
// used. The pauses are those the caller read (cached or live). A snapshot
// of a Stage read live keeps the settings of the cached one it re-checks
// (settings): invalid settings are judged, and reported, on the cache
// alone, so that a live read ahead of the cache does not report them twice.
func (c *Controller) snapshotOf(key cache.ObjectName, stage *kargo.Stage, value string, m *memo, pauses, held []*v1alpha1.StagePause, settings *latch.Settings) *snapshot {
	s := &snapshot{key: key, stage: stage, memo: m, now: c.clock.Now(), value: value, dryRun: c.cfg.DryRun, held: held}
	if s.leftAlone = c.leftAlone(stage, value, m); s.leftAlone {
		return s
	}
	if settings != nil {
		s.settings = *settings
	} else {
		var problem string
		s.settings, problem = settingsFor(stage.Annotations, c.cfg.Defaults)
		if s.settings.VerifyOnLatch && !c.cfg.VerifyOnLatch {
			// The operator has neither the rights nor the cache of runs.
			s.settings.VerifyOnLatch = false
			problem = joinProblems(problem, api.VerifyOnLatchAnnotation+" is true, but this kargo-latch runs without --enable-verify-on-latch (the verify-on-latch rights and Argo Rollouts' CRDs): it starts no verification")
		}
		c.verifyOnLatchAvailability(stage, m, &s.settings)
		c.reportConfig(stage, m, problem)
	}
	s.prior, s.garbage = c.priorRecord(stage, value, m)
	obs, unknownHealth := observe(stage, m.health)
	c.reportInput(stage, m, unknownHealth, len(obs.Apps))
	if !stage.State.Present() {
		created := stage.CreationTimestamp.Time
		obs.CreatedWithoutRecord = &created
	}
	s.obs = obs
	s.setPauses(pauses, held, c.cachedPromotions)
	return s
}

// withPauses is the snapshot with these pauses: those a failure's pause
// just made.
func (s *snapshot) withPauses(pauses, held []*v1alpha1.StagePause, cached func(*kargo.Stage) []*kargo.Promotion) *snapshot {
	out := *s
	out.setPauses(pauses, held, cached)
	return &out
}

// setPauses puts the pauses covering the Stage, and those held for its
// resume, into the snapshot and its observation; and, for a paused Stage
// that drains, its cached Promotions.
func (s *snapshot) setPauses(pauses, held []*v1alpha1.StagePause, cached func(*kargo.Stage) []*kargo.Promotion) {
	s.pauses, s.held = pauses, held
	s.obs.Pauses, s.obs.PauseUIDs, s.obs.Deleted = nil, nil, nil
	for _, p := range pauses {
		s.obs.Pauses = append(s.obs.Pauses, p.Name)
		if s.obs.PauseUIDs == nil {
			s.obs.PauseUIDs = make(map[string]string, len(pauses))
		}
		s.obs.PauseUIDs[p.Name] = string(p.UID)
	}
	for _, p := range held {
		s.obs.Deleted = append(s.obs.Deleted, p.Name)
	}
	s.promotions = nil
	if s.settings.DrainOnPause && len(pauses) > 0 && cached != nil {
		s.promotions = cached(s.stage)
	}
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
// beginning, beside it (see stageWriteFor and keptGarbage).
func (c *Controller) priorRecord(stage *kargo.Stage, value string, m *memo) (r latch.Record, garbage bool) {
	if c.cfg.DryRun && m.dryRunRecord != nil {
		return *m.dryRunRecord, false
	}
	r, err := latch.Decode(value)
	if err != nil {
		if warnOnce(&m.badState, value) {
			c.report.Warn(stage, api.ReasonInvalidState, "Ignoring the %s annotation and starting over from the Stage's status (%v); %s",
				api.StateAnnotation, err, c.garbageReport(value))
			c.cfg.Metrics.InvalidInput.WithLabelValues(stage.Namespace, stage.Name, "state").Inc()
		}
		return latch.Record{}, true
	}
	return r, false
}
