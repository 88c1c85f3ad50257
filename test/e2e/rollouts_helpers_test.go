package e2e

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kargo-latch/kargo-latch/test/cluster"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// The Argo Rollouts analysis controller the tests share: started on the
// shared cluster by the first test that needs one, stopped after the last.
// One per package keeps its informers' load off the two cores the suite
// shares.
var sharedRollouts struct {
	once sync.Once
	r    *cluster.Rollouts
	err  error
}

// rollouts returns the shared Argo Rollouts analysis controller (without
// an instance ID: it runs the AnalysisRuns without the instance-id label),
// starting it on first use.
func (w *world) rollouts(t *testing.T) *cluster.Rollouts {
	t.Helper()
	sharedRollouts.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		sharedRollouts.r, sharedRollouts.err = w.cluster.StartRollouts(ctx, cluster.RolloutsOptions{})
	})
	if sharedRollouts.err != nil {
		t.Fatalf("starting Argo Rollouts' analysis controller: %v", sharedRollouts.err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(sharedRollouts.r.Log)
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			t.Logf("the end of Argo Rollouts' log %s:\n%s", sharedRollouts.r.Log, strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
	})
	return sharedRollouts.r
}

// stopRollouts stops the shared controller, if a test started it.
func stopRollouts() {
	if sharedRollouts.r != nil {
		sharedRollouts.r.Stop()
	}
}

// metricServer is a web-metric endpoint the test controls, closed with it.
func metricServer(t *testing.T) *driver.MetricServer {
	t.Helper()
	m := driver.NewMetricServer()
	t.Cleanup(m.Close)
	return m
}

// followVerification plays Kargo's passes over the Stage's current
// verification until it is terminal, and returns its phase. Argo Rollouts
// needs a moment per measurement: waitLimit is ample for a metric of count 1.
func followVerification(t *testing.T, s *driver.Stage) string {
	t.Helper()
	var phase string
	waitFor(t, "Kargo's verification of "+s.Name+" to end", func() bool {
		var err error
		phase, err = s.KargoFollowVerification(context.Background())
		must(t, err)
		switch phase {
		case "Successful", "Failed", "Error", "Inconclusive", "Aborted":
			return true
		}
		return false
	})
	return phase
}
