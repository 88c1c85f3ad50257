// Command prometheusrule generates, from the plain rules file
// manifests/prometheus/rules.yaml, the PrometheusRule of
// manifests/components/monitoring, the Helm chart's copy of the rules
// (its PrometheusRule template reads them), and the rules of the shards
// example, with one KargoLatchDown per operator (see down.go), so that the
// forms cannot drift. Run it with `make generate`; a test fails when the
// output is stale.
package main

import (
	"bytes"
	"fmt"
	"os"

	"sigs.k8s.io/yaml"
)

const (
	source      = "manifests/prometheus/rules.yaml"
	target      = "manifests/components/monitoring/prometheusrule.yaml"
	chartTarget = "charts/kargo-latch/files/rules.yaml"
)

// generators make each generated file, by path, from the rules file.
var generators = map[string]func([]byte) ([]byte, error){
	target:       render,
	chartTarget:  renderChartRules,
	exampleRules: renderExampleRules,
	examplePatch: renderExamplePatch,
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "prometheusrule:", err)
		os.Exit(1)
	}
}

// run writes every generated file.
func run() error {
	in, err := os.ReadFile(source)
	if err != nil {
		return err
	}
	for path, generate := range generators {
		out, err := generate(in)
		if err != nil {
			return err
		}
		if err := os.WriteFile(path, out, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// render wraps a Prometheus rules file into a PrometheusRule object.
func render(rules []byte) ([]byte, error) {
	spec, err := parse(rules)
	if err != nil {
		return nil, err
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
	return generated(obj)
}

// renderChartRules writes the rules as the chart's PrometheusRule spec,
// without the source's comments.
func renderChartRules(rules []byte) ([]byte, error) {
	spec, err := parse(rules)
	if err != nil {
		return nil, err
	}
	return generated(spec)
}

// generated is v as YAML under the header that says where it comes from.
func generated(v any) ([]byte, error) {
	body, err := yaml.Marshal(v)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Generated from %s by `make generate`. Do not edit.\n", source)
	b.Write(body)
	return b.Bytes(), nil
}

// parse reads a Prometheus rules file.
func parse(rules []byte) (map[string]any, error) {
	var spec map[string]any
	if err := yaml.Unmarshal(rules, &spec); err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	if _, ok := spec["groups"]; !ok || len(spec) != 1 {
		return nil, fmt.Errorf("%s: want a rules file with only groups", source)
	}
	return spec, nil
}
