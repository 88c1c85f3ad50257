package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestGeneratedRuleIsCurrent fails when the PrometheusRule or the chart's
// rules were not regenerated after a change to the rules file.
func TestGeneratedRuleIsCurrent(t *testing.T) {
	root := filepath.Join("..", "..")
	in, err := os.ReadFile(filepath.Join(root, source))
	if err != nil {
		t.Fatal(err)
	}
	for path, gen := range generators {
		want, err := gen(in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(string(want), string(got)); diff != "" {
			t.Errorf("%s is stale; run `make generate` (-want +got):\n%s", path, diff)
		}
	}
}
