//go:build tools

// Package tools pins helm, which the chart's tests build into bin/. It is a
// module of its own so that helm's dependencies never enter the operator's
// go.mod nor the test cluster's.
package tools

import (
	_ "helm.sh/helm/v3/cmd/helm"
)
