//go:build tools

// Package tools pins Prometheus for the tests: promtool checks and unit-tests
// the alert rules, and the prometheus server scrapes the operator in the
// alert end-to-end tests. It is a module of its own, apart from test/tools,
// so that Prometheus's dependencies and k8s.io/kubernetes's never have to
// agree on versions, and neither enters the operator's go.mod.
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)
