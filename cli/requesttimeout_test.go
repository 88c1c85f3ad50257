package cli

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kargo-latch/kargo-latch/kargo"
)

// blackHole is an API server that accepts connections and never answers:
// it reads what it is sent and writes nothing.
func blackHole(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns sync.WaitGroup
	t.Cleanup(func() { _ = l.Close(); conns.Wait() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Go(func() {
				defer func() { _ = c.Close() }()
				buf := make([]byte, 4096)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
				}
			})
		}
	}()
	return "http://" + l.Addr().String()
}

// Issue 24 §4: against an API server that accepts and never answers, a
// request fails once its answer is late (client-go alone would wait for
// ever), and so a wait ends (exit 1) instead of hanging.
// Not parallel: it shortens responseTimeout.
func TestRequestsToABlackHoleEnd(t *testing.T) {
	defer func(d time.Duration) { responseTimeout = d }(responseTimeout)
	responseTimeout = 300 * time.Millisecond
	k := &kubeFlags{kubeconfig: "/dev/null", userAgent: "test"}
	k.overrides.ClusterInfo.Server = blackHole(t)
	k.overrides.Context.Namespace = "project"
	client, ns, err := k.client()
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	_, err = client.Resource(kargo.StagesResource).Namespace(ns).Get(t.Context(), "prod", metav1.GetOptions{})
	var late *errNoAnswer
	if !errors.As(err, &late) || time.Since(start) > 5*time.Second {
		t.Fatalf("a read from a black hole: %v after %v, want no answer within %v", err, time.Since(start), responseTimeout)
	}
	// The caller's own cancellation stays a cancellation.
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := client.Resource(kargo.StagesResource).Namespace(ns).Get(ctx, "prod", metav1.GetOptions{}); !errors.Is(err, context.Canceled) {
		t.Errorf("a read cancelled by its caller: %v, want context.Canceled", err)
	}

	start = time.Now()
	var stdout, stderr bytes.Buffer
	done := make(chan error, 1)
	o := &waitOptions{condition: "latched", unreachable: 500 * time.Millisecond}
	go func() { done <- o.wait(t.Context(), client, ns, "prod", &stdout, &stderr) }()
	select {
	case err := <-done:
		// Its first read fails (no answer in time): it ends at once.
		var unreachable *errUnreachable
		if (!errors.As(err, &unreachable) && !errors.As(err, &late)) || exitCode(err, true) != ExitFailed {
			t.Errorf("wait: %v (exit %d), want exit 1: no answer", err, exitCode(err, true))
		}
		t.Logf("the wait gave up after %v (--unreachable-timeout 500ms, answers due within %v): %v", time.Since(start).Round(time.Millisecond), responseTimeout, err)
	case <-time.After(10 * time.Second):
		t.Fatalf("the wait against a black hole has not ended after 10s; stderr:\n%s", stderr.String())
	}
}
