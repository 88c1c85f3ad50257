// Package eventually is for the tests of the controller's packages: it
// waits for what an informer or a worker goroutine makes true, by polling
// with a deadline, so that a test needs no fixed sleep.
package eventually

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
)

// Timeout is how long True waits: far longer than any condition takes on a
// loaded machine, short enough to fail a stuck test soon.
const Timeout = 10 * time.Second

// True waits until cond holds, and fails the test when it has not within
// Timeout.
func True(t testing.TB, cond func() bool) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, Timeout, true,
		func(context.Context) (bool, error) { return cond(), nil })
	if err != nil {
		t.Fatalf("condition not met within %v", Timeout)
	}
}
