package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// TestParserIsThePrometheusOfTheTests: the queries are parsed and evaluated
// here by the Prometheus that test/tools/prometheus pins for promtool and
// the end-to-end tests, so that a bump of one is a bump of both.
func TestParserIsThePrometheusOfTheTests(t *testing.T) {
	mine := prometheusRequired(t, "go.mod")
	if tools := prometheusRequired(t, filepath.Join(root, "test", "tools", "prometheus", "go.mod")); mine != tools {
		t.Errorf("hack/dashboard requires github.com/prometheus/prometheus %s, test/tools/prometheus %s: bump both", mine, tools)
	}
}

var prometheusRequirement = regexp.MustCompile(`(?m)^\s*(?:require\s+)?github\.com/prometheus/prometheus\s+(\S+)`)

func prometheusRequired(t *testing.T, goMod string) string {
	t.Helper()
	raw, err := os.ReadFile(goMod)
	if err != nil {
		t.Fatal(err)
	}
	m := prometheusRequirement.FindSubmatch(raw)
	if m == nil {
		t.Fatalf("%s does not require github.com/prometheus/prometheus", goMod)
	}
	return string(m[1])
}
