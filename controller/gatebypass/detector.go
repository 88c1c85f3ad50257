// Package gatebypass detects the auto-promotions that passed kargo-latch's
// pause gate, and says so once per Promotion: a Warning GateBypassed on the
// Stage and kargo_latch_gate_bypassed_total{project,stage}.
//
// The pause gate (manifests/components/pause-gate) refuses the
// auto-promotions of the identities its setting names as Kargo's
// controllers (kargo-latch-kargo-controllers; the chart's
// pauseGate.kargoController* values). A Kargo controller that runs as
// another identity, such as a shard whose kubeconfig names another user,
// passes it, and silently: Kubernetes reports nothing. The Detector judges
// Promotions by their actor and phase, whoever created them: it sees the
// result, an auto-promotion that exists although a pause covered its Stage
// when it was created. The Warning names the username that created the
// Promotion, which the opt-in MutatingAdmissionPolicy of
// manifests/components/requested-by (the chart's
// pauseGate.requestedBy.enabled) stamps on every Promotion made under a
// pause, overwriting any value its creator gave, and which its guard keeps
// anyone from changing later (api.RequestedByAnnotation); and the setting
// to widen. Without that component the Warning says the username is
// unknown and how to turn the mark on.
//
// Once per Promotion, also across restarts and replicas: the Event's name
// derives from the Promotion's UID and is written directly
// (report.Reporter.OnceAbout), so a second try, by this process, a
// restarted one or the other replica, finds it there (AlreadyExists) and
// neither warns nor counts. Events expire (kube-apiserver's --event-ttl, 1h
// by default), so only Promotions younger than Horizon are judged: their
// Event, made when they were first seen, outlives that age. A Promotion
// first seen older than that (the operator was down for its first Horizon)
// is not reported; the next bypass will be.
//
// The controller hands the Detector every Promotion its Promotion cache
// sees, finished or not (controller/promotioncache): each row of its list,
// which after a restart shows what was made while the operator was down
// (promotions take seconds, so such a bypass has usually finished), and
// each event after it. Only the unfinished ones (and those a drain aborted)
// are kept in that cache; the once-only Event, not the cache, keeps a
// Promotion from being reported twice.
//
// Every replica judges (the informers run on standbys too), so a bypass
// made while no replica led is not missed; the Event's name keeps it one.
// The counter counts on the replica whose Create made the Event, so a sum
// over replicas counts each bypass once.
package gatebypass

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/controller/report"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/metrics"
)

// Horizon bounds the age of the Promotions judged: below the default Event
// TTL of kube-apiserver (1h), with room for clock skew between the operator
// and the API server.
const Horizon = 50 * time.Minute

// retryAfter is how long a report that failed (the API server refused the
// Event) waits before it is tried again. A finished Promotion is not
// cached, so no later event of its own would bring it back; retries end
// when it is older than Horizon.
const retryAfter = time.Minute

// Config is what a Detector reads and writes through; all but DryRun are
// required.
type Config struct {
	// Pauses lists the cached StagePauses of a namespace.
	Pauses func(ns string) []*v1alpha1.StagePause
	// PausesSynced reports whether every StagePause cache has synced:
	// until then, a Promotion no cached pause covers is not dismissed.
	PausesSynced func() bool
	// CachesSynced reports whether the Stage and StagePause caches have
	// synced. A judgement waits for them, however long a cold start takes:
	// it needs every pause of the project, and its Event the Stage's UID.
	CachesSynced func() bool
	// Stage reads a Stage from the caches, for the UID its Event refers to.
	Stage func(cache.ObjectName) (*kargo.Stage, bool, error)
	// KargoController reports whether a username is one of Kargo's
	// controllers (the operator's --kargo-controllers and
	// --kargo-controller-regex): a Promotion it created with a kubernetes:
	// create-actor is an auto-promotion that Kargo's webhook took for a
	// person's. Nil: none is.
	KargoController func(username string) bool
	// Reporter writes the once-only Events.
	Reporter *report.Reporter
	// Metrics counts the bypasses reported.
	Metrics *metrics.Recorder
	Clock   clock.PassiveClock
	// DryRun reports nothing: a --dry-run shadow would take the real
	// operator's once-only Event, and its count, from it.
	DryRun bool
}

// Detector is one operator's gate-bypass state: a FIFO of Promotions to
// judge off the informers' goroutines (a report is an API call), and the
// Promotions this process reported, so that it tries each only once.
type Detector struct {
	cfg Config

	mu       sync.Mutex
	reported map[types.UID]time.Time // reported → creation time; pruned past Horizon
	queued   map[types.UID]bool
	queue    []*kargo.Promotion
	running  bool
	// stop is closed when the operator stops (Start's context): no
	// judgement waits, and no retry runs, past it.
	stop   <-chan struct{}
	logger klog.Logger
	// retryAfter is retryAfter (shorter in tests).
	retryAfter time.Duration
}

// New returns a Detector; Start gives it the operator's lifetime.
func New(cfg Config) *Detector {
	return &Detector{
		cfg:      cfg,
		reported: map[types.UID]time.Time{}, queued: map[types.UID]bool{},
		logger:     klog.Background().WithName("gate-bypass"),
		retryAfter: retryAfter,
	}
}

// Start ends the judgements and their retries when ctx is done, and logs
// through ctx's logger.
func (d *Detector) Start(ctx context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stop = ctx.Done()
	d.logger = klog.FromContext(ctx).WithName("gate-bypass")
}

// stopped reports whether the operator has stopped (never, before Start).
func (d *Detector) stopped() bool {
	d.mu.Lock()
	done := d.stop
	d.mu.Unlock()
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// Observe is called with every Promotion the Promotion cache sees. It
// never blocks on the API server: most Promotions are judged here from the
// caches and dismissed; a bypass, or a Promotion seen before the pause
// caches synced, goes to a goroutine that reports it.
func (d *Detector) Observe(p *kargo.Promotion) {
	if d.cfg.DryRun || !candidate(p, d.cfg.Clock.Now(), d.cfg.KargoController) {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, done := d.reported[p.UID]; done || d.queued[p.UID] {
		return
	}
	if d.cfg.PausesSynced() && len(d.covering(p)) == 0 {
		return
	}
	d.queued[p.UID] = true
	d.queue = append(d.queue, p)
	if !d.running {
		d.running = true
		go d.run()
	}
}

// covering lists the cached StagePauses that covered p's Stage when p was
// created.
func (d *Detector) covering(p *kargo.Promotion) []*v1alpha1.StagePause {
	return coveringAt(d.cfg.Pauses(p.Namespace), p)
}

// run judges and reports the queued Promotions in order, and ends when the
// queue is empty.
func (d *Detector) run() {
	for {
		d.mu.Lock()
		if len(d.queue) == 0 {
			d.running = false
			d.mu.Unlock()
			return
		}
		p := d.queue[0]
		d.queue[0] = nil
		d.queue = d.queue[1:]
		logger := d.logger
		d.mu.Unlock()

		err := d.judge(logger, p)

		d.mu.Lock()
		delete(d.queued, p.UID)
		if err == nil {
			now := d.cfg.Clock.Now()
			for uid, created := range d.reported {
				if now.Sub(created) > Horizon {
					delete(d.reported, uid)
				}
			}
		}
		d.mu.Unlock()
		if err != nil {
			logger.Error(err, "Could not report a bypassed pause gate; trying again", "promotion", klog.KObj(p), "after", d.retryAfter)
			d.retry(p)
		}
	}
}

// retry judges p again after retryAfter (real time, as the API server's
// answer is), unless the operator has stopped by then.
func (d *Detector) retry(p *kargo.Promotion) {
	time.AfterFunc(d.retryAfter, func() {
		if !d.stopped() {
			d.Observe(p)
		}
	})
}

// judge reports p if pauses covered its Stage when it was created, and
// marks it reported. It first waits for the Stage and pause caches (not the
// Promotions' own list, which brings most candidates and may still be
// reading). A Promotion that has grown past Horizon meanwhile is not
// judged: its Event, if one was made, may have expired, and a second would
// report it twice.
func (d *Detector) judge(logger klog.Logger, p *kargo.Promotion) error {
	for !d.cfg.CachesSynced() {
		if d.stopped() {
			return nil
		}
		// Real time, not the Clock: a fake clock must not move by this wait.
		time.Sleep(50 * time.Millisecond)
	}
	if !candidate(p, d.cfg.Clock.Now(), d.cfg.KargoController) {
		return nil
	}
	pauses := d.covering(p)
	if len(pauses) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	created, err := d.report(ctx, p, pauses)
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.reported[p.UID] = p.CreationTimestamp.Time
	d.mu.Unlock()
	if created {
		d.cfg.Metrics.GateBypassed.WithLabelValues(p.Namespace, p.Stage).Inc()
		logger.Info("An auto-promotion passed the pause gate", "promotion", klog.KObj(p), "stage", p.Stage, "pause", pauses[0].Name,
			"requestedBy", p.Annotations[api.RequestedByAnnotation])
	}
	return nil
}
