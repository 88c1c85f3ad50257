package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
)

// Leader election timings. A leader that dies without releasing its Lease
// is replaced within LeaseDuration+RetryPeriod (14s); one that shuts down
// releases it at once. Renewing every 2s costs one small write.
const (
	leaseDuration = 12 * time.Second
	renewDeadline = 8 * time.Second
	retryPeriod   = 2 * time.Second
)

// leadOrStandBy runs work while this replica holds the Lease. A standby
// keeps its caches warm and waits. Losing the Lease (the API server was
// unreachable for longer than the renew deadline, say) stops the work at
// once; the replica then waits for that work to finish and campaigns again,
// without exiting. On shutdown (ctx done) the Lease is released, so that the
// standby takes over without waiting for it to expire.
func leadOrStandBy(ctx context.Context, kube kubernetes.Interface, namespace, name string, work func(context.Context)) {
	logger := klog.FromContext(ctx)
	id := identity()
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: name, Namespace: namespace},
		Client:     kube.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	// One term works at a time: client-go does not wait for
	// OnStartedLeading to return before a new election can begin.
	var term sync.Mutex
	for ctx.Err() == nil {
		leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
			Lock:            lock,
			Name:            name,
			ReleaseOnCancel: true,
			LeaseDuration:   leaseDuration,
			RenewDeadline:   renewDeadline,
			RetryPeriod:     retryPeriod,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(ctx context.Context) {
					term.Lock()
					defer term.Unlock()
					logger.Info("Became the leader", "identity", id)
					work(ctx)
				},
				OnStoppedLeading: func() {
					logger.Info("Stopped leading", "identity", id, "shuttingDown", ctx.Err() != nil)
				},
				OnNewLeader: func(leader string) {
					if leader != id {
						logger.Info("Standing by", "leader", leader)
					}
				},
			},
		})
	}
}

func identity() string {
	host, _ := os.Hostname()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return host + "_" + hex.EncodeToString(b)
}

// podNamespace is the namespace the process runs in, in a Pod; else def.
func podNamespace(def string) string {
	b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
	if err != nil || strings.TrimSpace(string(b)) == "" {
		return def
	}
	return strings.TrimSpace(string(b))
}
