package eventually

import (
	"sync/atomic"
	"testing"
)

// TestTrueWaitsForTheCondition: True returns once another goroutine has
// made the condition hold.
func TestTrueWaitsForTheCondition(t *testing.T) {
	var done atomic.Bool
	go done.Store(true)
	True(t, done.Load)
	if !done.Load() {
		t.Error("True returned before the condition held")
	}
}
