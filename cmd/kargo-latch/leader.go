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

// leaseTimings are the leader election's timings.
type leaseTimings struct {
	leaseDuration, renewDeadline, retryPeriod time.Duration
}

// A leader that dies without releasing its Lease is replaced after about
// LeaseDuration+RetryPeriod (14s), at most ~21s: the standby polls every
// RetryPeriod with client-go's jitter (2–4.4s) and counts the LeaseDuration
// from when it saw the last renewal. One that shuts down releases the Lease
// once its workers have returned. Renewing every 2s costs one small write.
var defaultLeaseTimings = leaseTimings{leaseDuration: 12 * time.Second, renewDeadline: 8 * time.Second, retryPeriod: 2 * time.Second}

// leadOrStandBy runs work while this replica holds the Lease, and returns
// once ctx is done, no work runs, and the Lease is released. A standby
// keeps its caches warm and waits.
//
// Losing the Lease (renewals failed for the renew deadline) cancels the
// work at once, a LeaseDuration-RenewDeadline margin (4s) before another
// replica may take it; the replica waits for that work to return and
// campaigns again, without exiting.
//
// On shutdown the work is cancelled, and the Lease is released only once
// the work has returned, so that the standby takes over at once rather than
// after the Lease expires, but never while this replica's workers still
// write. client-go's ReleaseOnCancel is off: it releases as soon as the
// term ends, on shutdown or on a lost renewal, with the work still running.
func leadOrStandBy(ctx context.Context, leases kubernetes.Interface, namespace, name string, work func(context.Context)) {
	leadOrStandByWith(ctx, leases, namespace, name, defaultLeaseTimings, work)
}

func leadOrStandByWith(ctx context.Context, leases kubernetes.Interface, namespace, name string, timings leaseTimings, work func(context.Context)) {
	logger := klog.FromContext(ctx)
	id := identity()
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Name: name, Namespace: namespace},
		Client:     leases.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	// The election outlives ctx: it is stopped only after the current
	// term's work has returned; then the Lease is released.
	electionCtx, stopElection := context.WithCancel(context.WithoutCancel(ctx))
	defer stopElection()
	// One term works at a time: client-go does not wait for
	// OnStartedLeading to return before a new election can begin. Holding
	// term also holds back the release.
	var term sync.Mutex
	go func() {
		<-ctx.Done()
		term.Lock()
		defer term.Unlock()
		stopElection()
	}()
	for electionCtx.Err() == nil {
		leaderelection.RunOrDie(electionCtx, leaderelection.LeaderElectionConfig{
			Lock:          lock,
			Name:          name,
			LeaseDuration: timings.leaseDuration,
			RenewDeadline: timings.renewDeadline,
			RetryPeriod:   timings.retryPeriod,
			Callbacks: leaderelection.LeaderCallbacks{
				OnStartedLeading: func(termCtx context.Context) {
					term.Lock()
					defer term.Unlock()
					if ctx.Err() != nil {
						return // elected while shutting down: no work to start
					}
					// The work ends with the term or with the process.
					workCtx, stopWork := context.WithCancel(termCtx)
					defer stopWork()
					defer context.AfterFunc(ctx, stopWork)()
					logger.Info("Became the leader", "identity", id)
					work(workCtx)
					logger.Info("Workers stopped", "identity", id)
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
	release(ctx, lock, id, timings.renewDeadline)
}

// release gives up the Lease if this replica still holds it, as client-go's
// ReleaseOnCancel does, for the standby to take over without waiting for it
// to expire. The update is guarded by the resourceVersion just read, so a
// Lease another replica took meanwhile is left alone.
func release(ctx context.Context, lock *resourcelock.LeaseLock, id string, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	held, _, err := lock.Get(ctx)
	if err != nil || held.HolderIdentity != id {
		return
	}
	now := metav1.NewTime(time.Now())
	if err := lock.Update(ctx, resourcelock.LeaderElectionRecord{
		LeaderTransitions: held.LeaderTransitions, LeaseDurationSeconds: 1, RenewTime: now, AcquireTime: now,
	}); err != nil {
		klog.FromContext(ctx).Info("Could not release the Lease; the standby takes over once it expires", "err", err)
		return
	}
	klog.FromContext(ctx).Info("Released the Lease", "identity", id)
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
