package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/controller/verification"
)

// A cache that cannot list never syncs, and client-go retries forever with
// only a generic "Failed to watch" line. The usual causes are installation
// faults that only a person can fix: a CRD that is not installed (the API
// server answers 404 for its resource) and a missing RBAC right (403). So
// each informer's list and watch errors are diagnosed here, and the
// diagnosis is said at once in the log, on /readyz while the caches are not
// synced, and in the error Start returns when they have not synced in time.
// Only the core's caches (Stages, StagePauses, and, in the background,
// Promotions) count for the start and the readiness: verify-on-latch's
// AnalysisRun caches are optional, and a problem of theirs turns
// verify-on-latch off where it concerns, never the operator
// (runinformer.go, verifyavailability.go).

// problemLogInterval is how often one cache's unchanged problem is logged
// again at error level; the reflector retries every 0.8s to 30s.
const problemLogInterval = time.Minute

// watchedCache is one informer's cache, named for people: the resource and
// the namespace it lists.
type watchedCache struct {
	name   string
	synced cache.InformerSynced
	// background marks a cache whose sync does not hold back the workers
	// or the readiness: the Promotions'. Judging a Stage needs the Stages
	// and the pauses; of Promotions a sync needs only those queued for a
	// late drain, which the list's own events bring to the Stage anyway, and
	// the gate-bypass judgement waits for the Stages and pauses itself. A
	// list that keeps failing makes the operator not ready after
	// CacheSyncTimeout (backgroundStalled). Their list at
	// start reads a row of every Promotion of the project, 20 per Stage in
	// Kargo's default retention: waiting for it would make the cold start
	// of a 10,000-Stage installation that of 200,000 objects.
	background bool
}

// cacheProblems holds the last diagnosed list or watch failure of each
// cache, by cache name.
type cacheProblems struct {
	mu      sync.Mutex
	byCache map[string]cacheProblem
}

type cacheProblem struct {
	text   string
	known  bool // diagnosed: an installation fault a person must fix
	logged time.Time
}

// record notes a cache's problem and reports whether to log it at error
// level: it is new, changed, or was last logged a while ago.
func (p *cacheProblems) record(name, text string, known bool, now time.Time) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byCache == nil {
		p.byCache = map[string]cacheProblem{}
	}
	prev, seen := p.byCache[name]
	if seen && prev.text == text && now.Sub(prev.logged) < problemLogInterval {
		return false
	}
	p.byCache[name] = cacheProblem{text: text, known: known, logged: now}
	return true
}

// clear forgets a cache's problem: its watch opened.
func (p *cacheProblems) clear(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.byCache, name)
}

func (p *cacheProblems) of(name string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.byCache[name].text
}

// knownOf is a cache's diagnosed problem; empty when it has none, or only
// one that may pass by itself.
func (p *cacheProblems) knownOf(name string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if problem := p.byCache[name]; problem.known {
		return problem.text
	}
	return ""
}

// diagnosed lists the diagnosed problems of every cache, sorted.
func (p *cacheProblems) diagnosed() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, problem := range p.byCache {
		if problem.known {
			out = append(out, problem.text)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// cacheName names the cache of gvr listed in namespace ns ("" for all).
func cacheName(gvr schema.GroupVersionResource, ns string) string {
	return selectedCacheName(gvr, ns, "")
}

// selectedCacheName names the cache of the objects of gvr matching a label
// selector (all when empty) in namespace ns: the two Stage caches of an
// operator of a shard and the default shard have names of their own.
func selectedCacheName(gvr schema.GroupVersionResource, ns, selector string) string {
	name := gvr.GroupResource().String()
	if selector != "" {
		name += " selected by " + strconv.Quote(selector)
	}
	if ns == "" {
		return name + " in all namespaces"
	}
	return name + " in namespace " + ns
}

// watchErrorHandler diagnoses the list and watch errors of the informer of
// gvr in namespace ns, whose cache is named name. Errors it cannot explain
// go to client-go's default handler, which logs them as before.
func (c *Controller) watchErrorHandler(gvr schema.GroupVersionResource, ns, name string) cache.WatchErrorHandlerWithContext {
	return c.diagnosingHandler(&c.problems, gvr, ns, name, false)
}

// diagnosingHandler is watchErrorHandler recording into problems. The
// problem of an optional cache (verify-on-latch's) is logged as news, once
// per change: an install that grants its rights per project has one that
// is refused for good, and that is no error of the operator's.
func (c *Controller) diagnosingHandler(problems *cacheProblems, gvr schema.GroupVersionResource, ns, name string, optional bool) cache.WatchErrorHandlerWithContext {
	return func(ctx context.Context, r *cache.Reflector, err error) {
		text, known := diagnose(gvr, name, err)
		if !known {
			cache.DefaultWatchErrorHandler(ctx, r, err)
		}
		changed := problems.of(name) != text
		if problems.record(name, text, known, c.clock.Now()) && known {
			switch logger := klog.FromContext(ctx); {
			case !optional:
				logger.Error(err, "Cannot list or watch "+name+": "+text, "resource", gvr.GroupResource().String(), "namespace", ns)
			case changed:
				logger.Info("Verify-on-latch cannot list or watch "+name+": "+text, "resource", gvr.GroupResource().String(), "namespace", ns)
			}
		}
	}
}

// diagnose says what an informer's list or watch error means and how to fix
// it; known is false for errors it has no advice for.
func diagnose(gvr schema.GroupVersionResource, cacheName string, err error) (text string, known bool) {
	gr := gvr.GroupResource().String()
	served := gvr.GroupVersion().String() + " " + gvr.Resource
	switch {
	case apierrors.IsNotFound(err) && gvr.Group == verification.AnalysisRunsResource.Group:
		return fmt.Sprintf("Argo Rollouts' CRD %s is not installed (the API server does not serve %s); install Argo Rollouts' CRDs, which verify-on-latch needs, or run without --enable-verify-on-latch",
			gr, served), true
	case apierrors.IsForbidden(err) && gvr.Group == verification.AnalysisRunsResource.Group:
		return fmt.Sprintf("kargo-latch's identity may not list and watch %s (%s); bind its ServiceAccount to the ClusterRole kargo-latch-verify-on-latch (manifests/components/verify-on-latch), cluster-wide or in this project",
			cacheName, statusMessage(err)), true
	case apierrors.IsNotFound(err) && gvr.Group == v1alpha1.GroupVersion.Group:
		return fmt.Sprintf("the StagePause CRD %s is not installed (the API server does not serve %s); install it: kubectl apply -k manifests/crds (part of manifests/default)",
			gr, served), true
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("Kargo's CRD %s is not installed (the API server does not serve %s); install Kargo first",
			gr, served), true
	case apierrors.IsForbidden(err):
		return fmt.Sprintf("kargo-latch's identity may not list and watch %s (%s); grant its ServiceAccount get, list and watch on %s, as the shipped ClusterRole kargo-latch does (manifests/base/operator-rbac.yaml)",
			cacheName, statusMessage(err), gr), true
	case apierrors.IsUnauthorized(err):
		return fmt.Sprintf("the API server rejected kargo-latch's credentials listing %s (401 Unauthorized); check its ServiceAccount token or --kubeconfig", cacheName), true
	}
	return fmt.Sprintf("listing or watching %s failed: %v", cacheName, err), false
}

// statusMessage is the API server's own words in err, which name the
// identity and the verb refused.
func statusMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) && status.Status().Message != "" {
		return status.Status().Message
	}
	return err.Error()
}

// foregroundSynced reports whether every informer but those syncing in the
// background has synced: the Stages' and the StagePauses'.
func (c *Controller) foregroundSynced() bool {
	for _, wc := range c.caches {
		if !wc.background && !wc.synced() {
			return false
		}
	}
	return true
}

// pausesSynced reports whether every StagePause cache has synced: enough to
// dismiss a Promotion no pause covered (controller/gatebypass).
func (c *Controller) pausesSynced() bool {
	for _, inf := range c.pauseInformers {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

// backgroundStalled names the background caches that have not synced
// CacheSyncTimeout after the others did and report a list or watch error,
// diagnosed or not: a Promotion list that keeps failing (a 429, a 500, a
// continue token expired after hundreds of pages) leaves the late drain and
// the gate-bypass judgement of Promotions made while the operator was down
// without their input.
func (c *Controller) backgroundStalled() []string {
	at := c.foregroundSyncedAt.Load()
	if at == nil || c.cfg.CacheSyncTimeout == 0 || c.clock.Since(*at) < c.cfg.CacheSyncTimeout {
		return nil
	}
	var out []string
	for _, wc := range c.caches {
		if text := c.problems.of(wc.name); wc.background && text != "" && !wc.synced() {
			out = append(out, text)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// HasSynced reports whether every informer has synced.
func (c *Controller) HasSynced() bool {
	for _, wc := range c.caches {
		if !wc.synced() {
			return false
		}
	}
	return true
}

// Ready returns nil once Start has seen every informer synced (but those
// syncing in the background: see watchedCache), else why not: the diagnosed problem of each cache not synced, when there is one.
// It turns ready together with kargo_latch_cache_synced. A synced cache
// whose watch is refused (a ClusterRole with list but not watch) has
// stopped following the API server: that is not ready either, until a watch
// opens again.
func (c *Controller) Ready() error {
	if c.foregroundSyncedAt.Load() != nil {
		if problems := c.problems.diagnosed(); len(problems) > 0 {
			return errors.New("informer caches synced, but cannot list or watch: " + strings.Join(problems, "; "))
		}
		if stalled := c.backgroundStalled(); len(stalled) > 0 {
			return errors.New("informer caches synced, but the Promotions' cannot list: " + strings.Join(stalled, "; "))
		}
		return nil
	}
	if problems := c.unsyncedProblems(false); problems != "" {
		return errors.New("informer caches not synced: " + problems)
	}
	if problems := c.unsyncedProblems(true); problems != "" {
		return errors.New("informer caches not synced yet; the Promotions' (which do not hold back the start) cannot list: " + problems)
	}
	return errors.New("informer caches not synced yet")
}

// unsyncedProblems lists the problems of the caches not synced, those
// syncing in the background included or not.
func (c *Controller) unsyncedProblems(background bool) string {
	var problems []string
	for _, wc := range c.caches {
		if wc.background && !background {
			continue
		}
		if text := c.problems.of(wc.name); text != "" && !wc.synced() {
			problems = append(problems, text)
		}
	}
	slices.Sort(problems)
	return strings.Join(slices.Compact(problems), "; ")
}

// waitForCaches waits until every informer has synced (but those syncing in
// the background, whose problems /readyz reports all the same, and
// verify-on-latch's optional ones, which are not among them). When they have not
// after the configured CacheSyncTimeout and a list or watch error says why
// (a missing CRD or right), it gives up with that reason, so the Pod
// crash-loops visibly; with no error reported, the caches are only slow (a
// big cluster, a loaded API server): it says so and keeps waiting.
func (c *Controller) waitForCaches(ctx context.Context) error {
	c.cfg.Metrics.CacheSynced.Set(0)
	var synced []cache.InformerSynced
	for _, wc := range c.caches {
		if !wc.background {
			synced = append(synced, wc.synced)
		}
	}
	for waited := time.Duration(0); ; waited += c.cfg.CacheSyncTimeout {
		waitCtx, cancel := ctx, context.CancelFunc(func() {})
		if c.cfg.CacheSyncTimeout > 0 {
			waitCtx, cancel = context.WithTimeout(ctx, c.cfg.CacheSyncTimeout)
		}
		ok := cache.WaitForNamedCacheSyncWithContext(waitCtx, synced...)
		cancel()
		if ok {
			c.cfg.Metrics.CacheSynced.Set(1)
			now := c.clock.Now()
			c.foregroundSyncedAt.Store(&now)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// A background cache never holds back the start, nor is it the
		// reason the foreground ones are slow.
		if why := c.unsyncedProblems(false); why != "" {
			return fmt.Errorf("informer caches did not sync within %v: %s", waited+c.cfg.CacheSyncTimeout, why)
		}
		klog.FromContext(ctx).Info("Informer caches still syncing, with no list or watch error of theirs reported; waiting on", "after", waited+c.cfg.CacheSyncTimeout, "background", c.unsyncedProblems(true))
	}
}
