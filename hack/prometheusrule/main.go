// Command prometheusrule generates the PrometheusRule of
// manifests/components/monitoring from the plain rules file
// manifests/prometheus/rules.yaml, so that the two forms cannot drift.
// Run it with `make generate`; a test fails when the output is stale.
package main

import (
	"bytes"
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
)

const (
	source = "manifests/prometheus/rules.yaml"
	target = "manifests/components/monitoring/prometheusrule.yaml"
)

func main() {
	in, err := os.ReadFile(source)
	if err == nil {
		var out []byte
		if out, err = render(in); err == nil {
			err = os.WriteFile(target, out, 0o600)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "prometheusrule:", err)
		os.Exit(1)
	}
}

// render wraps a Prometheus rules file into a PrometheusRule object.
func render(rules []byte) ([]byte, error) {
	var spec map[string]any
	if err := yaml.Unmarshal(rules, &spec); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	if _, ok := spec["groups"]; !ok || len(spec) != 1 {
		return nil, fmt.Errorf("%s: want a rules file with only groups", source)
	}
	obj := map[string]any{
		"apiVersion": "monitoring.coreos.com/v1",
		"kind":       "PrometheusRule",
		"metadata": map[string]any{
			"name":      "kargo-latch",
			"namespace": "kargo-latch",
			"labels":    map[string]any{"app.kubernetes.io/name": "kargo-latch"},
		},
		"spec": spec,
	}
	body, err := yaml.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Generated from %s by `make generate`. Do not edit.\n", source)
	b.Write(body)
	return b.Bytes(), nil
}
