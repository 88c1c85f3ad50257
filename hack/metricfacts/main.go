// Command metricfacts prints, as JSON, what a dashboard must know of the
// operator's metrics: the name, type and labels of every metric family the
// operator registers, and the values of the phase label. The dashboard check
// (hack/dashboard) runs it: that check lives in a module of its own, to keep
// Prometheus's own packages out of the operator's go.mod, and so cannot
// import the operator.
package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/kargo-latch/kargo-latch/latch"
)

// Facts is the output.
type Facts struct {
	Families []Family `json:"families"`
	Phases   []string `json:"phases"`
}

func main() {
	families, err := operatorFamilies()
	if err != nil {
		fmt.Fprintln(os.Stderr, "metricfacts:", err)
		os.Exit(1)
	}
	facts := Facts{Families: families}
	for _, p := range latch.Phases {
		facts.Phases = append(facts.Phases, string(p))
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(facts); err != nil {
		fmt.Fprintln(os.Stderr, "metricfacts:", err)
		os.Exit(1)
	}
}
