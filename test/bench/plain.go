package main

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kargo-latch/kargo-latch/kargo"
)

// plainInformer is the baseline: a plain, untransformed dynamic informer
// over the Stages of the given namespaces. It prints its RSS after sync (in
// bytes) and its sync time (in nanoseconds).
func plainInformer(args []string) int {
	if len(args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: plain-informer KUBECONFIG NAMESPACE...")
		return 2
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg.QPS, cfg.Burst = 50, 100
	dyn := dynamic.NewForConfigOrDie(cfg)
	ctx := context.Background()
	t0 := time.Now()
	var synced []cache.InformerSynced
	var keep []cache.SharedIndexInformer
	for _, ns := range args[1:] {
		f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, ns, nil)
		inf := f.ForResource(kargo.StagesResource).Informer()
		f.Start(ctx.Done())
		synced = append(synced, inf.HasSynced)
		keep = append(keep, inf)
	}
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return 1
	}
	took := time.Since(t0)
	runtime.GC()
	r, err := rss(os.Getpid())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	runtime.KeepAlive(keep)
	fmt.Println(r, int64(took))
	return 0
}
