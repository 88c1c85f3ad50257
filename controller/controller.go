// Package controller runs kargo-latch's reconcile loop. It is the only code
// that reads or writes Kargo objects: dynamic informers, trimmed to the
// fields kargo-latch reads, feed a typed workqueue of Stage names; each sync
// steps the pure latch machine and writes the Stage's record only when it
// changed.
package controller

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/controller/gatebypass"
	"github.com/kargo-latch/kargo-latch/controller/gatesetting"
	"github.com/kargo-latch/kargo-latch/controller/markverified"
	"github.com/kargo-latch/kargo-latch/controller/pausing"
	"github.com/kargo-latch/kargo-latch/controller/promotioncache"
	"github.com/kargo-latch/kargo-latch/controller/report"
	"github.com/kargo-latch/kargo-latch/controller/verification"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/metrics"
)

// Config is what a Controller needs. Zero values take the defaults noted.
type Config struct {
	Dynamic dynamic.Interface
	// StageClient, from kargo.NewStageClient, lists and watches Stages
	// straight into their mirror, sparing the decoding of their large
	// statuses into maps: the cold start's main CPU cost. Nil lists them
	// with Dynamic (as unit tests with a fake dynamic client do). It also
	// lists Promotions as a table of their metadata, stage and phase
	// (controller/promotioncache); without it they are listed whole, page
	// by page.
	StageClient rest.Interface
	// Kube sends Events.
	Kube kubernetes.Interface
	// Namespaces limits the operator to these Kargo projects; empty means
	// all namespaces.
	Namespaces []string
	// Shard and DefaultShard pick the Stages this operator serves, as
	// Kargo's controllers pick theirs (see shards.go); neither means all.
	Shard        string
	DefaultShard bool
	// Defaults are the settings of a Stage without setting annotations.
	Defaults latch.Settings
	// Workers syncing Stages in parallel (default 8).
	Workers int
	// DryRun decides and reports but writes nothing to Kargo objects.
	DryRun bool
	// GateSetting is the setting that names Kargo's controllers, as the
	// operator was given it: gate-bypass detection judges by it (see
	// gatebypass.Config), and Start compares it with the installed
	// pause-gate policies and warns where they differ. Nil: no check.
	GateSetting *gatesetting.Setting
	// KargoController overrides GateSetting's judgement of a username
	// without the check at start (for tests). Nil: GateSetting's, or none.
	KargoController func(username string) bool
	// Metrics records kargo-latch's metrics (required).
	Metrics *metrics.Recorder
	// QueueMetrics gives the workqueue its metrics; nil for none.
	QueueMetrics workqueue.MetricsProvider
	// Recorder overrides the Event recorder built from Kube (for tests).
	Recorder record.EventRecorder
	// Clock is the time source (default: the real clock).
	Clock clock.WithTicker
	// Resync is how often StagePauses and unfinished Promotions are
	// resynced (default 10m). Stages are not resynced as a whole: at 10,000
	// Stages that is a burst of 10,000 syncs that every reaction waits
	// behind; each time-based transition asks for its own requeue, and a key
	// dropped after its retries is tried again after droppedRetryAfter.
	Resync time.Duration
	// StatusMissingAfter is how old a Stage without status must be before
	// that is reported: a brand-new Stage has none until Kargo reconciles
	// it (default 1m).
	StatusMissingAfter time.Duration
	// VerifyOnLatch lets Stages opt into verify-on-latch: the operator
	// watches the AnalysisRuns it makes and may start them. Where it
	// cannot watch them (Argo Rollouts' CRDs missing, no rights in a
	// project), verify-on-latch is off and reported, and nothing else is
	// (verifyavailability.go).
	VerifyOnLatch bool
	// RolloutsInstanceID labels the runs it starts for that Argo Rollouts
	// controller instance, as Kargo's ROLLOUTS_CONTROLLER_INSTANCE_ID.
	RolloutsInstanceID string
	// CacheSyncTimeout bounds Start's wait for the caches; 0 waits until
	// the context is done. A cache that cannot list (a missing CRD or
	// right) then fails Start with the reason, rather than hanging.
	CacheSyncTimeout time.Duration
}

// Controller reconciles Kargo Stages.
type Controller struct {
	cfg   Config
	clock clock.WithTicker
	// work holds the queues of the current leadership term; nil while this
	// replica does not lead, when events are not queued at all.
	work   atomic.Pointer[workQueues]
	report *report.Reporter
	marker *markverified.Marker // marks Freight verified (controller/markverified)
	memos  *memos
	// Pausing (controller/pausing): failure pauses and their Events, the
	// drain of queued auto-promotions.
	failures *pausing.Failures
	drainer  *pausing.Drainer
	// verifier starts and ends verify-on-latch's AnalysisRuns, and reports
	// them (controller/verification).
	verifier *verification.Verifier

	// selectors are the label selectors of this operator's shard.
	selectors []string
	// Informers by namespace; the key "" holds an all-namespaces informer.
	// A namespace's Stages are the union of its Stage informers, one per
	// selector (see stageInformersFor).
	stageInformers map[string][]cache.SharedIndexInformer
	pauseInformers map[string]cache.SharedIndexInformer
	// runs are the caches of kargo-latch's own AnalysisRuns
	// (verify-on-latch: runinformer.go); nil without it.
	runs      *runCaches
	informers []cache.SharedIndexInformer
	caches    []watchedCache
	problems  cacheProblems
	// promotions caches the unfinished Promotions (controller/promotioncache).
	promotions *promotioncache.Cache
	// foregroundSyncedAt is when Start saw the caches synced (but those
	// syncing in the background: see watchedCache); nil until then.
	foregroundSyncedAt atomic.Pointer[time.Time]
	// gateBypass judges every Promotion the cache sees (controller/gatebypass).
	gateBypass *gatebypass.Detector

	// releaser lets go of held pauses; pauseStatus keeps StagePauses'
	// status, the work of the StagePause queue.
	releaser    *pausing.Releaser
	pauseStatus *pausing.StatusWriter
}

// New builds a Controller and its informers; Run starts them.
func New(cfg Config) (*Controller, error) {
	if cfg.Dynamic == nil || cfg.Kube == nil || cfg.Metrics == nil {
		return nil, errors.New("controller: Dynamic, Kube and Metrics are required")
	}
	if cfg.Workers <= 0 {
		cfg.Workers = 8
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Resync == 0 {
		cfg.Resync = 10 * time.Minute
	}
	if cfg.StatusMissingAfter == 0 {
		cfg.StatusMissingAfter = time.Minute
	}
	c := &Controller{
		cfg:            cfg,
		clock:          cfg.Clock,
		memos:          newMemos(),
		report:         report.New(cfg.Kube, cfg.Recorder, cfg.Clock),
		selectors:      shardSelectors(cfg.Shard, cfg.DefaultShard),
		stageInformers: map[string][]cache.SharedIndexInformer{},
		pauseInformers: map[string]cache.SharedIndexInformer{},
	}
	c.verifier = &verification.Verifier{
		Starter: &verification.Starter{Dynamic: cfg.Dynamic, InstanceID: cfg.RolloutsInstanceID},
		Report:  c.report, Metrics: cfg.Metrics, Clock: cfg.Clock, DryRun: cfg.DryRun,
	}
	if cfg.VerifyOnLatch {
		c.runs = newRunCaches()
	}
	c.marker = markverified.New(cfg.Dynamic, c.report, cfg.Metrics, c.livePauses)
	c.failures = &pausing.Failures{Dynamic: cfg.Dynamic, Report: c.report, NameTaken: cfg.Metrics.PauseNameTaken}
	c.drainer = &pausing.Drainer{
		Dynamic: cfg.Dynamic, Report: c.report, Clock: cfg.Clock, DryRun: cfg.DryRun,
		Selectors: c.selectors, ListPage: c.promotionPage, Cached: c.cachedPromotions,
	}
	c.releaser = &pausing.Releaser{Dynamic: cfg.Dynamic, Stages: c.stagesIn, Sharded: cfg.Shard != "" || cfg.DefaultShard, DryRun: cfg.DryRun}
	c.pauseStatus = &pausing.StatusWriter{
		Pause: c.pauseByKey, Stages: c.stagesIn, Term: func() any { return c.work.Load() },
		Dynamic: cfg.Dynamic, Releaser: c.releaser, Report: c.report, Metrics: cfg.Metrics, Clock: cfg.Clock,
		Key: pausing.StatusKey(cfg.Shard, cfg.DefaultShard), DryRun: cfg.DryRun,
	}
	c.gateBypass = gatebypass.New(gatebypass.Config{
		Pauses: c.pausesIn, PausesSynced: c.pausesSynced, CachesSynced: c.foregroundSynced, Stage: c.stageByKey,
		Reporter: c.report, Metrics: cfg.Metrics, Clock: cfg.Clock, DryRun: cfg.DryRun, KargoController: kargoController(cfg),
	})
	c.promotions = c.newPromotionCache()
	namespaces := cfg.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	for _, ns := range namespaces {
		if err := c.watchNamespace(ns); err != nil {
			return nil, err
		}
	}
	cfg.Metrics.ObserveStages(phaseNames, newStageStates(c).all)
	cfg.Metrics.ObservePromotionsCached(c.promotions.Count)
	return c, nil
}

func (c *Controller) watchNamespace(ns string) error {
	watches := []func(string) error{c.watchStages, c.watchPromotions, c.watchPauses}
	if c.cfg.VerifyOnLatch {
		watches = append(watches, c.watchRuns)
	}
	for _, watch := range watches {
		if err := watch(ns); err != nil {
			return err
		}
	}
	return nil
}

// watchStages makes the Stage informers of ns, one per shard selector. A
// Stage whose shard label changes leaves its informer's selection: the API
// server sends that informer a delete, and the Stage's sync then finds it
// gone from this operator's caches and forgets it without a write, while
// the operator of its new shard is told of it as added.
func (c *Controller) watchStages(ns string) error {
	for _, selector := range c.selectors {
		stages := c.stageInformer(ns, selector)
		if err := c.prepareSelected(kargo.StagesResource, ns, selector, stages, kargo.TransformStage); err != nil {
			return err
		}
		if _, err := stages.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { c.enqueueStage(obj); c.enqueuePausesOf(obj) },
			UpdateFunc: c.updateStage,
			DeleteFunc: func(obj any) { c.enqueueStage(obj); c.enqueuePausesOf(obj) },
		}); err != nil {
			return fmt.Errorf("adding an event handler: %w", err)
		}
		c.stageInformers[ns] = append(c.stageInformers[ns], stages)
	}
	return nil
}

// watchPauses makes the StagePause informer of ns.
func (c *Controller) watchPauses(ns string) error {
	pauses := c.dynamicInformer(v1alpha1.StagePausesResource, ns, c.cfg.Resync)
	if err := c.prepare(v1alpha1.StagePausesResource, ns, pauses, transformPause); err != nil {
		return err
	}
	if _, err := pauses.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueuePause,
		UpdateFunc: c.updatePause,
		DeleteFunc: c.enqueuePause,
	}); err != nil {
		return fmt.Errorf("adding an event handler: %w", err)
	}
	c.pauseInformers[ns] = pauses
	return nil
}

// prepare sets an informer's transform and watch error handler, and counts
// it among the caches whose sync and watch the readiness reports.
func (c *Controller) prepare(gvr schema.GroupVersionResource, ns string, inf cache.SharedIndexInformer, transform cache.TransformFunc) error {
	return c.prepareSelected(gvr, ns, "", inf, transform)
}

// prepareSelected is prepare for an informer of the objects matching a
// label selector: each selector's cache is named apart in the readiness.
func (c *Controller) prepareSelected(gvr schema.GroupVersionResource, ns, selector string, inf cache.SharedIndexInformer, transform cache.TransformFunc) error {
	name := selectedCacheName(gvr, ns, selector)
	if err := inf.SetTransform(transform); err != nil {
		return fmt.Errorf("setting an informer transform: %w", err)
	}
	if err := inf.SetWatchErrorHandlerWithContext(c.watchErrorHandler(gvr, ns, name)); err != nil {
		return fmt.Errorf("setting an informer's watch error handler: %w", err)
	}
	c.caches = append(c.caches, watchedCache{name: name, synced: inf.HasSynced, background: gvr == kargo.PromotionsResource})
	return nil
}

// informerFor picks the informer serving namespace ns.
func (c *Controller) informerFor(m map[string]cache.SharedIndexInformer, ns string) cache.SharedIndexInformer {
	if inf, ok := m[ns]; ok {
		return inf
	}
	return m[metav1.NamespaceAll]
}

// stageInformersFor picks the Stage informers serving namespace ns, one per
// shard selector.
func (c *Controller) stageInformersFor(ns string) []cache.SharedIndexInformer {
	if infs, ok := c.stageInformers[ns]; ok {
		return infs
	}
	return c.stageInformers[metav1.NamespaceAll]
}

// Run starts the informers and the workers, and blocks until ctx is done.
func (c *Controller) Run(ctx context.Context) error {
	if err := c.Start(ctx); err != nil {
		return err
	}
	c.RunWorkers(ctx)
	return nil
}

// Start starts the informers and waits until their caches are synced, for
// at most CacheSyncTimeout (but verify-on-latch's, which nothing waits
// for). The informers run until ctx is done. A standby
// replica calls only Start, so that it is ready to take over with warm
// caches; the leader then calls RunWorkers.
func (c *Controller) Start(ctx context.Context) error {
	c.report.Start(ctx)
	c.gateBypass.Start(ctx)
	if c.cfg.GateSetting != nil {
		// Advice only: it never holds the caches back.
		go c.checkGateSetting(ctx)
	}
	for _, inf := range c.informers {
		go inf.RunWithContext(ctx)
	}
	// Verify-on-latch's caches are optional: nothing waits for them.
	c.startRunCaches(ctx)
	return c.waitForCaches(ctx)
}

// stageByKey reads a Stage from the informer caches of its namespace: not
// found when none of this shard's caches holds it.
func (c *Controller) stageByKey(key cache.ObjectName) (*kargo.Stage, bool, error) {
	for _, inf := range c.stageInformersFor(key.Namespace) {
		obj, exists, err := inf.GetIndexer().GetByKey(key.String())
		if err != nil {
			return nil, false, err
		}
		if !exists {
			continue
		}
		s, ok := obj.(*kargo.Stage)
		if !ok {
			return nil, false, fmt.Errorf("cache holds %T for Stage %s", obj, key)
		}
		return s, true, nil
	}
	return nil, false, nil
}
