package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// TestLeaseClientIsNotStarvedByEvents: a burst of Event writes that spends
// the main clients' whole rate budget does not delay a Lease request.
func TestLeaseClientIsNotStarvedByEvents(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"kargo-latch"}}`))
	}))
	defer srv.Close()
	// A budget that does not refill within the test.
	cl, err := newClients(&rest.Config{Host: srv.URL, QPS: 0.01, Burst: 5})
	if err != nil {
		t.Fatal(err)
	}
	events := cl.kube.CoreV1().RESTClient().GetRateLimiter()
	for events.TryAccept() { // the burst of Event writes
	}
	short := func() (context.Context, context.CancelFunc) {
		return context.WithTimeout(context.Background(), time.Second)
	}

	ctx, cancel := short()
	defer cancel()
	if _, err := cl.kube.CoreV1().Events("shop").Get(ctx, "e", metav1.GetOptions{}); err == nil {
		t.Fatal("the Event client still had budget: the burst was not injected")
	}
	ctx2, cancel2 := short()
	defer cancel2()
	start := time.Now()
	if _, err := cl.leases.CoordinationV1().Leases("kargo-latch").Get(ctx2, "kargo-latch", metav1.GetOptions{}); err != nil {
		t.Fatalf("renewing the Lease after a burst of Events: %v; the Lease client must have its own rate limiter", err)
	}
	t.Logf("Lease request with the Event budget spent: %v", time.Since(start).Round(time.Millisecond))
}
