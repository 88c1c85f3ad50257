package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/kargo-latch/kargo-latch/test/cluster"
)

// TestDemoOnStandInCRDs plays `make demo` as a plain clone does: Kargo's
// real CRDs out of reach on purpose (KARGO_LATCH_STAND_IN_CRDS, which CI
// may set where the refusal to fall back would stop it), so the cluster
// gets the project's stand-ins in test/crds. CI itself always has the real
// ones, so without this test it would never walk the path every user who
// clones the repository takes. Both stories play in full (about 20 s): every
// Kargo object the demo, the operator and the CLI create or read. It runs
// bin/kargo-latch, which `make e2e` builds first.
func TestDemoOnStandInCRDs(t *testing.T) {
	t.Setenv("KARGO_LATCH_STAND_IN_CRDS", "1")
	t.Setenv("DEMO_NODE", "")
	t.Setenv("DEMO_KEEP", "")
	t.Setenv("DEMO_DASHBOARD_PORT", "0") // beside a dashboard a person may run on 3100
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, real, err := cluster.KargoCRDDir(root, os.Getenv); err != nil || real {
		t.Fatalf("the cluster would get Kargo's real CRDs (%v, %v), not the stand-ins", real, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start = time.Now()
	if err := run(ctx); err != nil {
		t.Fatalf("the demo failed on the stand-in CRDs (its narration is above): %v", err)
	}
}
