package e2e

import (
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/controller/gatebypass"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

const promotionsCachedMetric = "kargo_latch_promotions_cached"

// finishedPromotions makes n Promotions to stage with client, each run by
// Kargo to Succeeded, a few at a time.
func finishedPromotions(t *testing.T, client dynamic.Interface, ns, stage string, n int) {
	t.Helper()
	finishedPromotionsBy(t, client, ns, stage, "", n)
}

// finishedPromotionsBy is finishedPromotions with a create-actor, and
// returns their names.
func finishedPromotionsBy(t *testing.T, client dynamic.Interface, ns, stage, actor string, n int) []string {
	t.Helper()
	names := make([]string, n)
	var wg sync.WaitGroup
	var failed atomic.Value
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				p, err := driver.CreatePromotion(ctx, client, ns, stage, actor)
				if err == nil {
					names[i] = p.GetName()
					err = env.kargo.SetPromotionPhase(ctx, ns, p.GetName(), driver.PhaseSucceeded)
				}
				if err != nil {
					failed.Store(err)
				}
			}
		})
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	if err, _ := failed.Load().(error); err != nil {
		t.Fatalf("making finished Promotions: %v", err)
	}
	return names
}

// countTableLists counts the operator's lists of Promotions as a table,
// paged: how its Promotion cache starts. It refuses nothing.
func countTableLists(n *atomic.Int64) func(*http.Request) error {
	return func(r *http.Request) error {
		q := r.URL.Query()
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/promotions") && q.Get("watch") == "" &&
			strings.Contains(r.Header.Get("Accept"), "as=Table") && q.Get("limit") != "" {
			n.Add(1)
		}
		return nil
	}
}

// TestPromotionCacheHoldsOnlyUnfinished: a project with 400 finished
// Promotions and 3 queued ones. The operator, started after all of them,
// caches the 3 (kargo_latch_promotions_cached), yet saw every one: its
// paged list found the one finished Promotion that bypassed the pause gate
// while no operator ran, and reported it. While it runs, a queued
// Promotion that ends leaves the cache, and 100 more that run to their end
// pass through it and leave no trace.
func TestPromotionCacheHoldsOnlyUnfinished(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	prod := env.createStage(t, ns, "prod", nil)
	env.createStage(t, ns, "dev", nil)
	otherKargo := otherKargoController(t, ns)

	// While no operator runs: Kargo's history, then a pause of prod that a
	// Kargo controller under another identity than the gate names
	// bypasses, and three auto-promotions queued to dev.
	finishedPromotions(t, env.kargoCtl, ns, "prod", 200)
	finishedPromotions(t, env.kargoCtl, ns, "dev", 199)
	must(t, createPause(env.dev, pause(ns, "hold", "prod", "Manual")))
	p, err := env.dyn.Resource(v1alpha1.StagePausesResource).Namespace(ns).Get(ctx, "hold", metav1.GetOptions{})
	must(t, err)
	waitFor(t, "the pause to be older than the bypass margin", func() bool {
		return time.Now().Truncate(time.Second).After(p.GetCreationTimestamp().Add(gatebypass.Margin))
	})
	// Kargo's own regex lacks that identity: its webhook stamps it as a
	// person, and the gate (by shape) lets it pass.
	bypass := finishedPromotionsBy(t, otherKargo, ns, "prod", "kubernetes:system:serviceaccount:"+ns+":kargo-controller", 1)[0]
	var queued []string
	for range 3 {
		q, err := driver.CreatePromotion(ctx, env.kargoCtl, ns, "dev", "")
		must(t, err)
		queued = append(queued, q.GetName())
	}

	var tableLists atomic.Int64
	settings := latch.Settings{LatchDeadline: time.Minute, DegradedGrace: time.Minute, DrainOnPause: true}
	op := startOperatorWith(t, env.operator, ns, settings, refusing(countTableLists(&tableLists)))
	ev := waitEvent(t, prod, api.ReasonGateBypassed)
	if ev.Related == nil || ev.Related.Name != bypass {
		t.Errorf("GateBypassed about %+v, want the finished bypass %s", ev.Related, bypass)
	}
	op.idle(t)
	if got := op.metric(promotionsCachedMetric); got != 3 {
		t.Errorf("%s = %v with 400 finished and 3 queued Promotions, want 3", promotionsCachedMetric, got)
	}
	if got := op.metric(gateMetric); got != 1 {
		t.Errorf("%s = %v, want the one bypass", gateMetric, got)
	}
	if n := tableLists.Load(); n < 1 {
		t.Errorf("%d paged table lists of Promotions, want the cache to start from one", n)
	}

	// Kargo runs a queued one to its end: it leaves the cache.
	op.processed(t, "a queued Promotion running", func() error {
		return env.kargo.SetPromotionPhase(ctx, ns, queued[0], driver.PhaseRunning)
	})
	if got := op.metric(promotionsCachedMetric); got != 3 {
		t.Errorf("%s = %v with one of the 3 running, want 3", promotionsCachedMetric, got)
	}
	op.processed(t, "the running Promotion succeeding", func() error {
		return env.kargo.SetPromotionPhase(ctx, ns, queued[0], driver.PhaseSucceeded)
	})
	if got := op.metric(promotionsCachedMetric); got != 2 {
		t.Errorf("%s = %v once it succeeded, want 2", promotionsCachedMetric, got)
	}

	// 100 more that run to their end while the operator watches: each is
	// cached while queued, and leaves.
	before := op.metric("kargo_latch_workqueue_adds_total")
	finishedPromotions(t, env.kargoCtl, ns, "dev", 100)
	op.idle(t)
	if got := op.metric(promotionsCachedMetric); got != 2 {
		t.Errorf("%s = %v after 100 more ran to their end, want still 2", promotionsCachedMetric, got)
	}
	if added := op.metric("kargo_latch_workqueue_adds_total") - before; added < 1 {
		t.Errorf("%v Stage syncs queued for 100 new Promotions, want their Stage synced", added)
	}
}
