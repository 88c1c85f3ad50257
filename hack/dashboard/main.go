// Command dashboard generates kargo-latch's Grafana dashboard (`make
// generate`) and writes it where it ships: the ConfigMap of the kustomize
// component manifests/components/grafana-dashboard and the Helm chart's
// files. Both are the same bytes; the test fails if either is stale.
//
// It is a module of its own: Grafana's SDK, and Prometheus's PromQL parser
// that its test checks the queries with, stay out of the operator's go.mod.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// targets are where the dashboard ships, relative to the repository root.
var targets = []string{
	"manifests/components/grafana-dashboard/dashboard.json",
	"charts/kargo-latch/files/dashboard.json",
}

// root is the repository root: the command runs in hack/dashboard.
const root = "../.."

func main() {
	out, err := render()
	if err != nil {
		fmt.Fprintln(os.Stderr, "dashboard:", err)
		os.Exit(1)
	}
	for _, target := range targets {
		if err := os.WriteFile(filepath.Join(root, target), out, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "dashboard:", err)
			os.Exit(1)
		}
	}
}

// render is the dashboard's JSON as it ships.
func render() ([]byte, error) {
	d, err := build()
	if err != nil {
		return nil, err
	}
	for i := range d.Panels {
		// Grafana keys panel state (links, a viewed panel) by id.
		if p := d.Panels[i].Panel; p != nil {
			p.Id = ptr(uint32(i + 1))
		}
	}
	out, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

func ptr[T any](v T) *T { return &v }
