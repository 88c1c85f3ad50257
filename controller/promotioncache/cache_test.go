package promotioncache

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/controller/internal/eventually"
	"github.com/kargo-latch/kargo-latch/kargo"
)

// promotion is an auto-promotion to Stage stage in project shop, created a
// day ago, as Kargo leaves it: phase empty for one Kargo has not looked at
// yet.
func promotion(name, stage, phase string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(kargo.GroupVersion.String())
	u.SetKind("Promotion")
	u.SetNamespace("shop")
	u.SetName(name)
	u.SetUID(k8stypes.UID(name + "-uid"))
	u.SetCreationTimestamp(metav1.NewTime(time.Now().Add(-24 * time.Hour).Truncate(time.Second)))
	u.SetLabels(map[string]string{kargo.StageLabel: stage})
	u.Object["spec"] = map[string]any{"stage": stage, "freight": "f"}
	if phase != "" {
		u.Object["status"] = map[string]any{"phase": phase}
	}
	return u
}

// history is Stage prod with n finished Promotions and three unfinished
// ones (queued unseen, Pending, Running), and Stage dev with one of each.
func history(n int) []runtime.Object {
	objs := []runtime.Object{promotion("dev.00000.done", "dev", "Succeeded"), promotion("dev.00001.running", "dev", "Running")}
	finished := []string{"Succeeded", "Failed", "Errored", "Aborted"}
	for i := range n {
		objs = append(objs, promotion(fmt.Sprintf("prod.%05d.f", i), "prod", finished[i%len(finished)]))
	}
	return append(objs,
		promotion("prod.90000.queued", "prod", ""),
		promotion("prod.90001.pending", "prod", "Pending"),
		promotion("prod.90002.running", "prod", "Running"))
}

func fakeDynamic(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{kargo.PromotionsResource: "PromotionList"}, objs...)
}

// heard records what a cache told its Handler and Dropped, by Promotion
// name.
type heard struct {
	mu                      sync.Mutex
	added, deleted, dropped []string
}

func (h *heard) config(client *dynamicfake.FakeDynamicClient) Config {
	note := func(to *[]string) func(any) {
		return func(obj any) {
			if p, ok := obj.(*kargo.Promotion); ok {
				h.mu.Lock()
				defer h.mu.Unlock()
				*to = append(*to, p.Name)
			}
		}
	}
	return Config{
		Dynamic: client,
		Handler: cache.ResourceEventHandlerFuncs{AddFunc: note(&h.added), DeleteFunc: note(&h.deleted)},
		Dropped: func(p *kargo.Promotion) { note(&h.dropped)(p) },
	}
}

func (h *heard) has(list *[]string, name string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Contains(*list, name)
}

// run runs a cache's informer of namespace ns (all when empty) and shard
// selector until the test ends, and waits for its list.
func run(t *testing.T, c *Cache, ns, selector string) {
	t.Helper()
	inf, err := c.NewInformer(ns, selector)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); inf.RunWithContext(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	eventually.True(t, inf.HasSynced)
}

func names(c *Cache, stage string) []string {
	var out []string
	for _, p := range c.ForStage("shop", stage) {
		out = append(out, p.Name)
	}
	slices.Sort(out)
	return out
}

// TestOnlyUnfinishedPromotionsAreHeld: of a project with 1,001 finished
// Promotions and 4 unfinished ones, the cache holds the 4, and counts
// them; the finished ones are handed to Dropped, once each. One that ends
// leaves the cache as a delete; a new one is held while it runs; one made
// finished never is, and only Dropped hears of it.
func TestOnlyUnfinishedPromotionsAreHeld(t *testing.T) {
	client := fakeDynamic(history(1000)...)
	h := &heard{}
	c := New(h.config(client))
	run(t, c, "", "")
	if got, want := names(c, "prod"), []string{"prod.90000.queued", "prod.90001.pending", "prod.90002.running"}; !slices.Equal(got, want) {
		t.Errorf("held %v, want only the unfinished %v", got, want)
	}
	if got := names(c, "dev"); !slices.Equal(got, []string{"dev.00001.running"}) {
		t.Errorf("held for dev %v, want its unfinished one", got)
	}
	if n := c.Count(); n != 4 {
		t.Errorf("Count() = %d, want 4", n)
	}
	if h.mu.Lock(); len(h.dropped) != 1001 || len(h.added) != 4 {
		t.Errorf("%d dropped and %d added by the list, want 1001 and 4", len(h.dropped), len(h.added))
	}
	h.mu.Unlock()

	promotions := client.Resource(kargo.PromotionsResource).Namespace("shop")
	ended := promotion("prod.90002.running", "prod", "Succeeded")
	if _, err := promotions.Update(context.Background(), ended, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually.True(t, func() bool { return h.has(&h.deleted, "prod.90002.running") })
	if got := c.Count(); got != 3 {
		t.Errorf("Count() = %d after one ended, want 3", got)
	}

	for _, p := range []*unstructured.Unstructured{promotion("prod.90003.new", "prod", ""), promotion("prod.90004.done", "prod", "Succeeded")} {
		if _, err := promotions.Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually.True(t, func() bool { return h.has(&h.added, "prod.90003.new") && h.has(&h.dropped, "prod.90004.done") })
	if got := names(c, "prod"); slices.Contains(got, "prod.90004.done") || len(got) != 3 {
		t.Errorf("held %v, want the 2 left and the new one, not the finished one", got)
	}
	if h.has(&h.added, "prod.90004.done") {
		t.Error("the Handler heard of a Promotion created finished")
	}
}

// TestExpiredWatchRelistsAndPrunes: a watch that expires (410 Gone) makes
// the informer list again; a Promotion deleted meanwhile, whose delete the
// watch never told, leaves the cache then.
func TestExpiredWatchRelistsAndPrunes(t *testing.T) {
	var expiring atomic.Pointer[watch.RaceFreeFakeWatcher]
	var watches atomic.Int64
	client := fakeDynamic(history(4)...)
	client.PrependWatchReactor("promotions", func(k8stesting.Action) (bool, watch.Interface, error) {
		if watches.Add(1) > 1 {
			return false, nil, nil // the relist's watch: the fake's own
		}
		w := watch.NewRaceFreeFake()
		expiring.Store(w)
		return true, w, nil
	})
	c := New(Config{Dynamic: client})
	run(t, c, "", "")
	eventually.True(t, func() bool { return expiring.Load() != nil })
	if got := len(names(c, "prod")); got != 3 {
		t.Fatalf("%d cached, want 3", got)
	}
	// Deleted while the watch sees nothing (its events are lost).
	if err := client.Tracker().Delete(kargo.PromotionsResource, "shop", "prod.90001.pending"); err != nil {
		t.Fatal(err)
	}
	expiring.Load().Error(&metav1.Status{Status: metav1.StatusFailure, Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version"})
	want := []string{"prod.90000.queued", "prod.90002.running"}
	eventually.True(t, func() bool { return slices.Equal(names(c, "prod"), want) })
	if n := watches.Load(); n < 2 {
		t.Errorf("%d watches, want a second after the relist", n)
	}
}

// A finished Promotion that a drain of this operator aborted
// (kargo-latch.io/drained-by) stays cached: the drain may still owe it its
// line in status.drained, and a restart must find it (the late drain).
func TestPromotionAbortedByADrainStaysCached(t *testing.T) {
	aborted := promotion("prod.90005.drained", "prod", "Aborted")
	aborted.SetAnnotations(map[string]string{kargo.AbortAnnotation: "terminate", api.DrainedByAnnotation: "hold-uid"})
	c := New(Config{Dynamic: fakeDynamic(append(history(10), aborted)...)})
	run(t, c, "", "")
	if got := names(c, "prod"); !slices.Contains(got, "prod.90005.drained") {
		t.Errorf("cached %v, want the drained Promotion among them", got)
	}
}

// TestInformerAsksOnlyForItsShard: every list and watch of a shard's
// informer asks the API server for the shard's Promotions alone, and each
// watch that opens is told to WatchOpened.
func TestInformerAsksOnlyForItsShard(t *testing.T) {
	const selector = kargo.ShardLabel + "=eu"
	client := fakeDynamic(history(2)...)
	var opened atomic.Value
	c := New(Config{Dynamic: client, WatchOpened: func(ns, selector string) { opened.Store(ns + "|" + selector) }})
	run(t, c, "shop", selector)
	eventually.True(t, func() bool { return opened.Load() != nil })
	if got := opened.Load(); got != "shop|"+selector {
		t.Errorf("WatchOpened(%q), want the informer's namespace and selector", got)
	}
	asked := 0
	for _, a := range client.Actions() {
		var got string
		switch a := a.(type) {
		case k8stesting.ListActionImpl:
			got = a.ListOptions.LabelSelector
		case k8stesting.WatchActionImpl:
			got = a.WatchRestrictions.Labels.String()
		default:
			continue
		}
		asked++
		if got != selector {
			t.Errorf("%s with selector %q, want %q", a.GetVerb(), got, selector)
		}
	}
	if asked < 2 {
		t.Errorf("%d lists and watches seen, want both", asked)
	}
}
