package controller

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/controller/pausing"
	"github.com/kargo-latch/kargo-latch/controller/report"
	"github.com/kargo-latch/kargo-latch/kargo"
)

// The pause gate (manifests/components/pause-gate) refuses the
// auto-promotions of the identities its setting names as Kargo's
// controllers (kargo-latch-kargo-controllers; the chart's
// pauseGate.kargoController* values). A Kargo controller that runs as
// another identity, such as a shard whose kubeconfig names another user,
// passes it, and silently: Kubernetes reports nothing. The operator judges
// Promotions by their actor and phase, whoever created them: it sees the
// result, an auto-promotion that exists although a pause covered its Stage
// when it was created, and says so once per Promotion: a Warning
// GateBypassed on the Stage and kargo_latch_gate_bypassed_total{project,stage}.
// The Warning names the username that created the Promotion, which the
// opt-in MutatingAdmissionPolicy of manifests/components/requested-by (the
// chart's pauseGate.requestedBy.enabled) stamps on every Promotion made
// under a pause, overwriting any value its creator gave, and which its guard
// keeps anyone from changing later (RequestedByAnnotation); and the setting
// to widen. Without that component the Warning says the username is unknown
// and how to turn the mark on.
//
// Once per Promotion, also across restarts and replicas: the Event's name
// derives from the Promotion's UID and is written directly (as eventOnce
// does), so a second try, by this process, a restarted one or the other
// replica, finds it there (AlreadyExists) and neither warns nor counts.
// Events expire (kube-apiserver's --event-ttl, 1h by default), so only
// Promotions younger than bypassHorizon are judged: their Event, made when
// they were first seen, outlives that age. A Promotion first seen older than
// that (the operator was down for its first bypassHorizon) is not reported;
// the next bypass will be.
//
// Every Promotion the Promotion watch sees is judged, finished or not
// (promotionwatch.go): each row of its list, which after a restart shows
// what was made while the operator was down (promotions take seconds, so
// such a bypass has usually finished), and each event after it. Only the
// unfinished ones (and those a drain aborted) are kept in the cache; the once-only Event, not the cache,
// keeps a Promotion from being reported twice.
//
// Every replica judges (the informers run on standbys too), so a bypass
// made while no replica led is not missed; the Event's name keeps it one.
// The counter counts on the replica whose Create made the Event, so a sum
// over replicas counts each bypass once.

// bypassHorizon bounds the age of the Promotions judged: below the default
// Event TTL of kube-apiserver (1h), with room for clock skew between the
// operator and the API server.
const bypassHorizon = 50 * time.Minute

// bypassRetryAfter is how long a report that failed (the API server refused
// the Event) waits before it is tried again. A finished Promotion is not
// cached, so no later event of its own would bring it back; retries end
// when it is older than bypassHorizon.
const bypassRetryAfter = time.Minute

// bypassWatch is one Controller's gate-bypass state: a FIFO of Promotions to
// judge off the informer's goroutine (a report is an API call), and the
// Promotions this process reported, so that it tries each only once.
type bypassWatch struct {
	mu       sync.Mutex
	reported map[types.UID]time.Time // reported → creation time; pruned past bypassHorizon
	queued   map[types.UID]bool
	queue    []*kargo.Promotion
	running  bool
	// stop is closed when the Controller stops (Start's context): no
	// judgement waits, and no retry runs, past it.
	stop <-chan struct{}
	// retryAfter is bypassRetryAfter (shorter in tests).
	retryAfter time.Duration
}

func newBypassWatch() *bypassWatch {
	return &bypassWatch{reported: map[types.UID]time.Time{}, queued: map[types.UID]bool{}, retryAfter: bypassRetryAfter}
}

// stopWhen ends the judgements and their retries when done is closed.
func (w *bypassWatch) stopWhen(done <-chan struct{}) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stop = done
}

// stopped reports whether the Controller has stopped (never, before
// stopWhen).
func (w *bypassWatch) stopped() bool {
	w.mu.Lock()
	done := w.stop
	w.mu.Unlock()
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// watchGateBypass is called with every Promotion the Promotion watch sees.
// It never blocks on the API server: most Promotions are judged here from
// the caches and dismissed; a bypass, or a Promotion seen before the caches
// synced, goes to a goroutine that reports it.
func (c *Controller) watchGateBypass(obj any) {
	p, ok := obj.(*kargo.Promotion)
	// A --dry-run shadow reports nothing here: it would take the real
	// operator's once-only Event, and its count, from it.
	if !ok || c.cfg.DryRun || !bypassCandidate(p, c.clock.Now()) {
		return
	}
	w := c.bypass
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, done := w.reported[p.UID]; done || w.queued[p.UID] {
		return
	}
	if c.pausesSynced() && len(c.pausesCovering(p)) == 0 {
		return
	}
	w.queued[p.UID] = true
	w.queue = append(w.queue, p)
	if !w.running {
		w.running = true
		go c.runBypassWatch(w)
	}
}

// pausesSynced reports whether every StagePause cache has synced: enough to
// dismiss a Promotion no pause covered.
func (c *Controller) pausesSynced() bool {
	for _, inf := range c.pauseInformers {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

// bypassCandidate: an auto-promotion for a Stage, young enough to judge.
func bypassCandidate(p *kargo.Promotion, now time.Time) bool {
	return p.Stage != "" && p.AutoPromotion() && !p.CreationTimestamp.IsZero() &&
		now.Sub(p.CreationTimestamp.Time) <= bypassHorizon
}

// GateBypassMargin is how much older than a Promotion a pause must be for the
// Promotion to count as a bypass. Creation times have whole seconds, and the
// API server's admission-policy parameter cache (one per API server) may
// learn of a new pause a moment after it is made: a Promotion admitted in
// that moment is no misconfigured gate, and must not page anyone.
const GateBypassMargin = 5 * time.Second

// pausesCovering lists the cached StagePauses that covered p's Stage when p
// was created: in p's project, naming its Stage or "*", not being deleted,
// and created at least GateBypassMargin before p.
func (c *Controller) pausesCovering(p *kargo.Promotion) []*v1alpha1.StagePause {
	return coveringAt(c.pausesIn(p.Namespace), p)
}

// coveringAt is pausesCovering over the pauses of p's project.
func coveringAt(pauses []*v1alpha1.StagePause, p *kargo.Promotion) []*v1alpha1.StagePause {
	var out []*v1alpha1.StagePause
	for _, sp := range pausing.InForce(pauses, p.Stage) {
		if !sp.CreationTimestamp.Add(GateBypassMargin).After(p.CreationTimestamp.Time) {
			out = append(out, sp)
		}
	}
	return out
}

// runBypassWatch judges and reports the queued Promotions in order, and
// ends when the queue is empty.
func (c *Controller) runBypassWatch(w *bypassWatch) {
	logger := klog.Background().WithName("gate-bypass")
	for {
		w.mu.Lock()
		if len(w.queue) == 0 {
			w.running = false
			w.mu.Unlock()
			return
		}
		p := w.queue[0]
		w.queue[0] = nil
		w.queue = w.queue[1:]
		w.mu.Unlock()

		err := c.judgeGateBypass(logger, p)

		w.mu.Lock()
		delete(w.queued, p.UID)
		if err == nil {
			now := c.clock.Now()
			for uid, created := range w.reported {
				if now.Sub(created) > bypassHorizon {
					delete(w.reported, uid)
				}
			}
		}
		w.mu.Unlock()
		if err != nil {
			logger.Error(err, "Could not report a bypassed pause gate; trying again", "promotion", klog.KObj(p), "after", w.retryAfter)
			c.retryGateBypass(p)
		}
	}
}

// retryGateBypass judges p again after bypassRetryAfter (real time, as the
// API server's answer is), unless the Controller has stopped by then.
func (c *Controller) retryGateBypass(p *kargo.Promotion) {
	time.AfterFunc(c.bypass.retryAfter, func() {
		if !c.bypass.stopped() {
			c.watchGateBypass(p)
		}
	})
}

// judgeGateBypass reports p if pauses covered its Stage when it was
// created, and marks it reported. It first waits for the Stage and pause
// caches, however long a cold start takes: a judgement needs every pause of
// the project, and its Event the Stage's UID (not the Promotions' own list,
// which brings most candidates and may still be reading). A Promotion that has grown past
// bypassHorizon meanwhile is not judged: its Event, if one was made, may
// have expired, and a second would report it twice.
func (c *Controller) judgeGateBypass(logger klog.Logger, p *kargo.Promotion) error {
	for !c.foregroundSynced() {
		if c.bypass.stopped() {
			return nil
		}
		// Real time, not c.clock: a fake clock must not move by this wait.
		time.Sleep(50 * time.Millisecond)
	}
	if !bypassCandidate(p, c.clock.Now()) {
		return nil
	}
	pauses := c.pausesCovering(p)
	if len(pauses) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	created, err := c.reportGateBypass(ctx, p, pauses)
	if err != nil {
		return err
	}
	w := c.bypass
	w.mu.Lock()
	w.reported[p.UID] = p.CreationTimestamp.Time
	w.mu.Unlock()
	if created {
		c.cfg.Metrics.GateBypassed.WithLabelValues(p.Namespace, p.Stage).Inc()
		logger.Info("An auto-promotion passed the pause gate", "promotion", klog.KObj(p), "stage", p.Stage, "pause", pauses[0].Name,
			"requestedBy", p.Annotations[api.RequestedByAnnotation])
	}
	return nil
}

// reportGateBypass writes the GateBypassed Event of p, and reports whether
// this call made it (false: it was there).
func (c *Controller) reportGateBypass(ctx context.Context, p *kargo.Promotion, pauses []*v1alpha1.StagePause) (bool, error) {
	stage := &kargo.Stage{}
	if s, ok, err := c.stageByKey(cache.NewObjectName(p.Namespace, p.Stage)); err == nil && ok {
		stage = s
	}
	msg := gateBypassMessage(p, pauses)
	now := metav1.NewTime(c.clock.Now())
	ev := &corev1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: gateBypassEventName(p), Namespace: p.Namespace},
		InvolvedObject: corev1.ObjectReference{
			APIVersion: kargo.GroupVersion.String(), Kind: "Stage",
			Namespace: p.Namespace, Name: p.Stage, UID: stage.UID,
		},
		Related: &corev1.ObjectReference{
			APIVersion: kargo.GroupVersion.String(), Kind: "Promotion",
			Namespace: p.Namespace, Name: p.Name, UID: p.UID,
		},
		Reason: api.ReasonGateBypassed, Message: report.Truncate(msg, 1024), Type: corev1.EventTypeWarning,
		Source:         corev1.EventSource{Component: api.FieldManager},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
	}
	_, err := c.cfg.Kube.CoreV1().Events(p.Namespace).Create(ctx, ev, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("recording %s for Promotion %s: %w", api.ReasonGateBypassed, p.Name, err)
	}
	return true, nil
}

// gateBypassMessage says which Promotion passed the gate under which pauses,
// who created it (the username the API server stamped, when it did; else
// how to have it stamped), which setting to widen, and what else to check.
// The operator does not know the gate's setting, nor the names the policies
// were installed under (a Helm release or a kustomize namePrefix renames
// them), so the advice covers both cases and names the default install's
// policy as that. Names are shortened so that the advice always fits in an
// Event's message (the Event's related object names the Promotion in full).
func gateBypassMessage(p *kargo.Promotion, pauses []*v1alpha1.StagePause) string {
	const shown = 3 // a project-wide pause and a Stage's own, and then some
	var names []string
	for _, sp := range pauses[:min(len(pauses), shown)] {
		names = append(names, fmt.Sprintf("%s (reason %s)", sp.Name, sp.EffectiveReason()))
	}
	if len(pauses) > shown {
		names = append(names, fmt.Sprintf("and %d more", len(pauses)-shown))
	}
	who, advice := "an unknown user (no "+api.RequestedByAnnotation+": turn on the requester mark, "+
		"Helm pauseGate.requestedBy.enabled or kustomize components/requested-by, Kubernetes 1.36+)",
		"if one of Kargo's controllers (a shard?) runs as an identity it does not name, add that username"
	if user := p.Annotations[api.RequestedByAnnotation]; user != "" {
		who, advice = report.Truncate(user, maxRequesterShown), "if that user is one of Kargo's (a shard?), add it"
	}
	return fmt.Sprintf("Auto-promotion %s, created at %s by %s, passed the pause gate although StagePause %s covered the Stage. "+
		"The gate refuses only those Kargo controllers its setting names: "+
		"%s to the Helm values pauseGate.kargoControllers or pauseGate.kargoControllerRegex, "+
		"or to the kustomize ConfigMap kargo-latch-kargo-controllers (usernames, regex). "+
		"If it is named there already, check that the pause gate's ValidatingAdmissionPolicy and binding "+
		"(kargo-latch-pause-gate in a default install) are installed. Runbook KargoLatchGateBypassed",
		report.Truncate(p.Name, 100), p.CreationTimestamp.UTC().Format(time.RFC3339), who, report.Truncate(strings.Join(names, ", "), 120), advice)
}

// maxRequesterShown bounds the username a GateBypassed message shows, so
// that the advice after it always fits (a longer one is cut, with "…").
const maxRequesterShown = 160

// gateBypassEventName derives the Event's name from the Promotion alone
// (its UID: a Promotion deleted and made again under its name is another
// Promotion), so every replica and restart finds the same one.
func gateBypassEventName(p *kargo.Promotion) string {
	id := string(p.UID)
	if id == "" {
		id = p.Namespace + "/" + p.Name
	}
	sum := sha256.Sum256([]byte(id))
	prefix := p.Stage
	if len(prefix) > 200 {
		prefix = prefix[:200]
	}
	return prefix + ".gatebypassed." + hex.EncodeToString(sum[:8])
}
