package main

import (
	"encoding/json"
	"fmt"
)

// The rules file's group downGroup holds one generic rule, KargoLatchDown,
// that fires when no operator is up. An installation with shards runs one
// operator per shard, each scraped as a job of its own (a ServiceMonitor
// names the job after the metrics Service, and gives the target its
// Service's namespace), and needs that rule once per job: a dead shard's
// operator goes unnoticed while any other is up. Each rule names the
// namespace too, so that a release of the same name in another namespace
// (another installation, scraped by the same Prometheus) does not keep it
// quiet. The
// Helm chart makes them from controller.shards in its PrometheusRule
// template; for kustomize, this generator makes them for the shards
// example (exampleOperators), as a patch of the monitoring component's
// PrometheusRule and as a plain rules file, which promtool tests. The
// chart's template does what perOperatorDown does; the e2e suite holds
// its output for `controller.shards: [eu]` to the example's.

const (
	downGroup = "kargo-latch-down"
	// exampleNamespace is the namespace of manifests/examples/shards.
	exampleNamespace = "kargo-latch"
	exampleDir       = "manifests/examples/shards-monitoring"
	exampleRules     = exampleDir + "/rules.yaml"
	examplePatch     = exampleDir + "/down-alerts-patch.yaml"
	operatorLabel    = "shard"
)

// operatorJob is an operator, by the shard key it counts under in a
// StagePause's status.shards, and the job its series are scraped as.
type operatorJob struct{ shard, job string }

// exampleOperators are the operators of manifests/examples/shards, with
// the jobs the monitoring component's ServiceMonitor gives them: their
// metrics Services' names.
var exampleOperators = []operatorJob{
	{shard: "default", job: "kargo-latch-metrics"},
	{shard: "eu", job: "kargo-latch-eu-metrics"},
}

// operatorDownExpr is true when no replica of job in namespace is up: all
// its targets fail, or it has none. Either arm gives the namespace and the
// job as labels, which the generic rule's annotations name
// (absent(up{job="…"} == 1) gives none).
func operatorDownExpr(namespace, job string) string {
	return fmt.Sprintf("max by (namespace, job) (up{namespace=%[1]q,job=%[2]q}) == 0 or absent(up{namespace=%[1]q,job=%[2]q})", namespace, job)
}

// perOperatorDown returns spec with the generic rule of downGroup made one
// per operator of ops: expr operatorDownExpr(exampleNamespace, job), the
// label shard, and
// the rest the generic rule's. It also returns the group's index.
func perOperatorDown(spec map[string]any, ops []operatorJob) (map[string]any, int, error) {
	out, err := deepCopy(spec)
	if err != nil {
		return nil, 0, err
	}
	groups, _ := out["groups"].([]any)
	for i, g := range groups {
		group, _ := g.(map[string]any)
		if group["name"] != downGroup {
			continue
		}
		rules, _ := group["rules"].([]any)
		if len(rules) != 1 {
			return nil, 0, fmt.Errorf("%s: group %s has %d rules, want the generic KargoLatchDown alone", source, downGroup, len(rules))
		}
		generic, _ := rules[0].(map[string]any)
		var perOperator []any
		for _, op := range ops {
			rule, err := deepCopy(generic)
			if err != nil {
				return nil, 0, err
			}
			rule["expr"] = operatorDownExpr(exampleNamespace, op.job)
			labels, _ := rule["labels"].(map[string]any)
			if labels == nil {
				labels = map[string]any{}
			}
			labels[operatorLabel] = op.shard
			rule["labels"] = labels
			perOperator = append(perOperator, rule)
		}
		group["rules"] = perOperator
		return out, i, nil
	}
	return nil, 0, fmt.Errorf("%s: no group %s", source, downGroup)
}

// renderExampleRules writes the rules of the shards example as a plain
// rules file: the source's, with a KargoLatchDown per operator.
func renderExampleRules(rules []byte) ([]byte, error) {
	spec, err := parse(rules)
	if err != nil {
		return nil, err
	}
	example, _, err := perOperatorDown(spec, exampleOperators)
	if err != nil {
		return nil, err
	}
	return generated(example)
}

// renderExamplePatch writes the JSON patch that makes the monitoring
// component's PrometheusRule the shards example's: it replaces the rules
// of downGroup, after testing that the group is where it was.
func renderExamplePatch(rules []byte) ([]byte, error) {
	spec, err := parse(rules)
	if err != nil {
		return nil, err
	}
	example, i, err := perOperatorDown(spec, exampleOperators)
	if err != nil {
		return nil, err
	}
	group := example["groups"].([]any)[i].(map[string]any)
	path := fmt.Sprintf("/spec/groups/%d", i)
	return generated([]any{
		map[string]any{"op": "test", "path": path + "/name", "value": downGroup},
		map[string]any{"op": "replace", "path": path + "/rules", "value": group["rules"]},
	})
}

// deepCopy copies a map of YAML values.
func deepCopy(m map[string]any) (map[string]any, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	return out, json.Unmarshal(b, &out)
}
