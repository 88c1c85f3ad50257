package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kargo-latch/kargo-latch/kargo"
)

// plainInformer is the baseline: plain, untransformed dynamic informers
// over the objects of the given namespaces that a naive operator doing
// kargo-latch's job would cache. First the Stages alone, whose sync time is
// the cold start's baseline; then, beside them, the Promotions and the
// Freight. A label selector (may be empty) picks the Stages and Promotions,
// as a shard's operator would; Freight carries no shard label, so all of it
// is watched. It prints its RSS after everything synced and a forced GC (in
// bytes), the Stages' sync time and the time until all had synced (in
// nanoseconds).
func plainInformer(args []string) int {
	if len(args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: plain-informer KUBECONFIG SELECTOR NAMESPACE...")
		return 2
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg.QPS, cfg.Burst = 50, 100
	dyn := dynamic.NewForConfigOrDie(cfg)
	selector, namespaces := args[1], args[2:]
	ctx := context.Background()
	var keep []cache.SharedIndexInformer
	watch := func(gvr schema.GroupVersionResource, selector string) []cache.InformerSynced {
		var synced []cache.InformerSynced
		for _, ns := range namespaces {
			f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, ns, func(o *metav1.ListOptions) { o.LabelSelector = selector })
			inf := f.ForResource(gvr).Informer()
			f.Start(ctx.Done())
			synced = append(synced, inf.HasSynced)
			keep = append(keep, inf)
		}
		return synced
	}
	t0 := time.Now()
	waitSynced(watch(kargo.StagesResource, selector))
	stageSync := time.Since(t0)
	promotions, freight := watch(kargo.PromotionsResource, selector), watch(kargo.FreightsResource, "")
	waitSynced(append(promotions, freight...))
	allSynced := time.Since(t0)
	runtime.GC()
	r, err := rss(os.Getpid())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	runtime.KeepAlive(keep)
	fmt.Println(r, int64(stageSync), int64(allSynced))
	return 0
}

// waitSynced waits until every informer has synced. It looks every
// millisecond: cache.WaitForCacheSync looks every 100 ms, which rounds a
// sync of half a second up by as much as 20%, the whole margin of the cold
// start's goal.
func waitSynced(synced []cache.InformerSynced) {
	for slices.ContainsFunc(synced, func(done cache.InformerSynced) bool { return !done() }) {
		time.Sleep(time.Millisecond)
	}
}
