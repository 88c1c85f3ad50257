package main

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/klog/v2/ktesting"
)

// syncInFlight is how long the injected slow sync keeps writing after its
// term is cancelled: long against a release that would not wait for it.
const syncInFlight = 500 * time.Millisecond

// leaseWatch is a fake API server's Lease, with a hook on every write.
type leaseWatch struct {
	kube *kubefake.Clientset
	// failRenewals refuses every write that keeps a holder, as an API
	// server too slow for the renew deadline would.
	failRenewals atomic.Bool
	// released is closed at the first write that gives the Lease up;
	// workDoneAtRelease says whether the work had returned then.
	released          chan struct{}
	workDoneAtRelease atomic.Bool
	workDone          *atomic.Bool
}

func newLeaseWatch(workDone *atomic.Bool) *leaseWatch {
	w := &leaseWatch{kube: kubefake.NewClientset(), released: make(chan struct{}), workDone: workDone}
	w.kube.PrependReactor("update", "leases", func(a k8stesting.Action) (bool, runtime.Object, error) {
		lease := a.(k8stesting.UpdateAction).GetObject().(*coordinationv1.Lease)
		if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
			select {
			case <-w.released:
			default:
				w.workDoneAtRelease.Store(w.workDone.Load())
				close(w.released)
			}
			return false, nil, nil
		}
		if w.failRenewals.Load() {
			return true, nil, errors.New("injected: renewal timed out")
		}
		return false, nil, nil
	})
	return w
}

func (w *leaseWatch) holder(t *testing.T) string {
	t.Helper()
	l, err := w.kube.CoordinationV1().Leases("kargo-latch").Get(context.Background(), "test", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// slowWork is a term's work whose last sync keeps writing for syncInFlight
// after the term is cancelled.
func slowWork(leading chan<- struct{}, done *atomic.Bool) func(context.Context) {
	return func(ctx context.Context) {
		close(leading)
		<-ctx.Done()
		time.Sleep(syncInFlight) // the injected fault: a sync still writing
		done.Store(true)
	}
}

// TestShutdownReleasesTheLeaseOnlyAfterTheWorkReturns: on SIGTERM, a sync
// in flight finishes before the standby may take over, and the process
// (leadOrStandBy's return) does not end before it.
func TestShutdownReleasesTheLeaseOnlyAfterTheWorkReturns(t *testing.T) {
	var workDone atomic.Bool
	w := newLeaseWatch(&workDone)
	_, ctx := ktesting.NewTestContext(t)
	ctx, shutdown := context.WithCancel(ctx)
	leading := make(chan struct{})
	returned := make(chan bool)
	go func() {
		leadOrStandByWith(ctx, w.kube, "kargo-latch", "test", defaultLeaseTimings, slowWork(leading, &workDone))
		returned <- workDone.Load()
	}()
	<-leading
	if w.holder(t) == "" {
		t.Fatal("working without holding the Lease")
	}
	start := time.Now()
	shutdown()
	if workDoneWhenReturned := <-returned; !workDoneWhenReturned {
		t.Error("leadOrStandBy returned (the process would exit) while a sync was in flight")
	}
	select {
	case <-w.released:
	default:
		t.Fatal("the Lease was never released on shutdown")
	}
	if !w.workDoneAtRelease.Load() {
		t.Error("the Lease was released while a sync was in flight: the standby could take over and write concurrently")
	}
	if h := w.holder(t); h != "" {
		t.Errorf("the Lease is still held by %q after shutdown", h)
	}
	t.Logf("shutdown with a sync in flight for %v took %v", syncInFlight, time.Since(start).Round(time.Millisecond))
}

// TestLostLeaseIsNotReleasedWhileTheWorkRuns: when renewals fail, the term
// ends and its work is cancelled; the Lease is not given up while that
// work still writes (the standby waits for it to expire instead).
func TestLostLeaseIsNotReleasedWhileTheWorkRuns(t *testing.T) {
	var workDone atomic.Bool
	w := newLeaseWatch(&workDone)
	_, ctx := ktesting.NewTestContext(t)
	ctx, shutdown := context.WithCancel(ctx)
	leading := make(chan struct{})
	returned := make(chan struct{})
	fast := leaseTimings{leaseDuration: 3 * time.Second, renewDeadline: time.Second, retryPeriod: 200 * time.Millisecond}
	termEnded := make(chan struct{})
	work := slowWork(leading, &workDone)
	go func() {
		defer close(returned)
		leadOrStandByWith(ctx, w.kube, "kargo-latch", "test", fast, func(ctx context.Context) {
			go func() { <-ctx.Done(); close(termEnded) }()
			work(ctx)
		})
	}()
	<-leading
	w.failRenewals.Store(true)
	<-termEnded // the renewals failed and the term ended: the fault was seen
	if ctx.Err() != nil {
		t.Fatal("the term ended by shutdown, not by the lost Lease")
	}
	waitUntil(t, "the cancelled work to return", workDone.Load)
	select {
	case <-w.released:
		if !w.workDoneAtRelease.Load() {
			t.Fatal("the lost Lease was released while its term's work was still writing")
		}
	default:
	}
	shutdown()
	<-returned
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
