package e2e

import (
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kargo-latch/kargo-latch/test/cluster"
)

// operatorDownJob is the job the first selector of a per-operator
// KargoLatchDown names; operatorDownExpr is the whole expression it must
// be, with every selector naming that job and the namespace.
var operatorDownJob = regexp.MustCompile(`up\{[^}]*job="([^"]+)"`)

func operatorDownExpr(namespace, job string) string {
	return fmt.Sprintf("max by (namespace, job) (up{namespace=%[1]q,job=%[2]q}) == 0 or absent(up{namespace=%[1]q,job=%[2]q})", namespace, job)
}

// TestDownAlertPerOperator: with shards, each operator has its own
// KargoLatchDown, for the job the ServiceMonitor gives it (its metrics
// Service's name) in its namespace, in both arms of the expression,
// labelled with its shard, and no generic rule is left, in the chart
// (under a release name and namespace of its own) and in the kustomize
// example. The ServiceMonitor names jobs that way: it sets no job label
// of its own (jobLabel, targetLabels, relabelings), and scrapes Services
// of its own namespace only. Without shards, or without the chart's
// ServiceMonitor (the jobs are then unknown), the chart keeps the generic
// rule.
func TestDownAlertPerOperator(t *testing.T) {
	t.Parallel()
	example, err := cluster.Kustomize(filepath.Join(env.cluster.Root, "manifests", "examples", "shards-monitoring"))
	must(t, err)
	on := []string{"controller.metrics.serviceMonitor.enabled=true", "prometheusRule.enabled=true"}
	for name, tc := range map[string]struct {
		objs      []*unstructured.Unstructured
		namespace string            // of the operators
		want      map[string]string // shard by job; nil: the generic rule alone
	}{
		"kustomize example": {objs: example, namespace: "kargo-latch", want: map[string]string{"kargo-latch-metrics": "default", "kargo-latch-eu-metrics": "eu"}},
		"chart": {
			objs:      renderChart(t, "latch", "ops", setFlags(append([]string{"controller.shards={eu,us}"}, on...))...),
			namespace: "ops",
			want:      map[string]string{"latch-kargo-latch-metrics": "default", "latch-kargo-latch-eu-metrics": "eu", "latch-kargo-latch-us-metrics": "us"},
		},
		"chart without shards":         {objs: renderChart(t, "latch", "ops", setFlags(on)...)},
		"chart without ServiceMonitor": {objs: renderChart(t, "latch", "ops", setFlags([]string{"controller.shards={eu}", "prometheusRule.enabled=true"})...)},
	} {
		t.Run(name, func(t *testing.T) {
			var rules []map[string]any
			var monitors, services []*unstructured.Unstructured
			for _, o := range tc.objs {
				switch o.GetKind() {
				case "PrometheusRule":
					groups, _, _ := unstructured.NestedSlice(o.Object, "spec", "groups")
					for _, g := range groups {
						for _, r := range g.(map[string]any)["rules"].([]any) {
							if rule := r.(map[string]any); rule["alert"] == "KargoLatchDown" {
								rules = append(rules, rule)
							}
						}
					}
				case "ServiceMonitor":
					monitors = append(monitors, o)
				case "Service":
					services = append(services, o)
				}
			}
			if tc.want == nil {
				if len(rules) != 1 || rules[0]["expr"] != `absent(up{job=~".*kargo-latch.*"} == 1)` {
					t.Errorf("KargoLatchDown rules %v, want the generic one alone", rules)
				}
				return
			}
			got := map[string]string{}
			for _, r := range rules {
				expr, _ := r["expr"].(string)
				m := operatorDownJob.FindStringSubmatch(expr)
				if m == nil {
					t.Errorf("a KargoLatchDown for no one job: %v", expr)
					continue
				}
				if want := operatorDownExpr(tc.namespace, m[1]); expr != want {
					t.Errorf("KargoLatchDown of job %s: %s, want %s", m[1], expr, want)
				}
				got[m[1]], _ = r["labels"].(map[string]any)["shard"].(string)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("KargoLatchDown shard by job %v, want %v", got, tc.want)
			}
			// The jobs are the Services the ServiceMonitor scrapes, and each
			// rule's shard is its Service's.
			if len(monitors) != 1 {
				t.Fatalf("%d ServiceMonitors, want 1", len(monitors))
			}
			monitor := monitors[0]
			checkNamesJobsByService(t, monitor, tc.namespace)
			selector, _, _ := unstructured.NestedStringMap(monitor.Object, "spec", "selector", "matchLabels")
			var scraped []string
			for _, s := range services {
				if s.GetNamespace() == tc.namespace && labels.SelectorFromSet(selector).Matches(labels.Set(s.GetLabels())) {
					scraped = append(scraped, s.GetName())
					if shard := s.GetLabels()["kargo-latch.io/shard"]; shard != "" && tc.want[s.GetName()] != shard {
						t.Errorf("Service %s of shard %s has a rule for shard %q", s.GetName(), shard, tc.want[s.GetName()])
					}
				}
			}
			if jobs := slices.Sorted(maps.Keys(tc.want)); !slices.Equal(slices.Sorted(slices.Values(scraped)), jobs) {
				t.Errorf("the ServiceMonitor scrapes the Services %v, the rules watch the jobs %v", scraped, jobs)
			}
		})
	}
}

// checkNamesJobsByService: the ServiceMonitor, in namespace, leaves the
// job label and the namespace label of its targets as the Prometheus
// Operator sets them, the name and namespace of the Service, which the
// per-operator rules match: no jobLabel, no targetLabels or relabeling
// that writes job or namespace, and Services of its own namespace only.
func checkNamesJobsByService(t *testing.T, monitor *unstructured.Unstructured, namespace string) {
	t.Helper()
	spec, _, _ := unstructured.NestedMap(monitor.Object, "spec")
	if monitor.GetNamespace() != namespace {
		t.Errorf("ServiceMonitor %s in namespace %q, want %q", monitor.GetName(), monitor.GetNamespace(), namespace)
	}
	if spec["jobLabel"] != nil || spec["namespaceSelector"] != nil {
		t.Errorf("ServiceMonitor %s sets jobLabel %v, namespaceSelector %v: the rules' jobs and namespace would not be the Services'", monitor.GetName(), spec["jobLabel"], spec["namespaceSelector"])
	}
	targetLabels, _, _ := unstructured.NestedStringSlice(spec, "targetLabels")
	for _, l := range targetLabels {
		if l == "job" || l == "namespace" {
			t.Errorf("ServiceMonitor %s copies the Service label %s onto its targets", monitor.GetName(), l)
		}
	}
	endpoints, _, _ := unstructured.NestedSlice(spec, "endpoints")
	for _, e := range endpoints {
		for _, field := range []string{"relabelings", "metricRelabelings"} {
			relabelings, _, _ := unstructured.NestedSlice(e.(map[string]any), field)
			for _, r := range relabelings {
				rule, _ := r.(map[string]any)
				if target := rule["targetLabel"]; target == "job" || target == "namespace" || rule["action"] == "labelmap" {
					t.Errorf("ServiceMonitor %s: an endpoint's %s write %v", monitor.GetName(), field, rule)
				}
			}
		}
	}
}
