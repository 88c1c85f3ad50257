package e2e

import (
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kargo-latch/kargo-latch/test/cluster"
)

// operatorDownJob is the job a per-operator KargoLatchDown watches.
var operatorDownJob = regexp.MustCompile(`up\{job="([^"]+)"\}`)

// TestDownAlertPerOperator: with shards, each operator has its own
// KargoLatchDown, for the job the ServiceMonitor gives it (its metrics
// Service's name), labelled with its shard, and no generic rule is left,
// in the chart (under a release name of its own) and in the kustomize
// example. Without shards, or without the chart's ServiceMonitor (the jobs
// are then unknown), the chart keeps the generic rule.
func TestDownAlertPerOperator(t *testing.T) {
	t.Parallel()
	example, err := cluster.Kustomize(filepath.Join(env.cluster.Root, "manifests", "examples", "shards-monitoring"))
	must(t, err)
	on := []string{"controller.metrics.serviceMonitor.enabled=true", "prometheusRule.enabled=true"}
	for name, tc := range map[string]struct {
		objs []*unstructured.Unstructured
		want map[string]string // shard by job; nil: the generic rule alone
	}{
		"kustomize example": {objs: example, want: map[string]string{"kargo-latch-metrics": "default", "kargo-latch-eu-metrics": "eu"}},
		"chart": {
			objs: renderChart(t, "latch", "ops", setFlags(append([]string{"controller.shards={eu,us}"}, on...))...),
			want: map[string]string{"latch-kargo-latch-metrics": "default", "latch-kargo-latch-eu-metrics": "eu", "latch-kargo-latch-us-metrics": "us"},
		},
		"chart without shards":         {objs: renderChart(t, "latch", "ops", setFlags(on)...)},
		"chart without ServiceMonitor": {objs: renderChart(t, "latch", "ops", setFlags([]string{"controller.shards={eu}", "prometheusRule.enabled=true"})...)},
	} {
		t.Run(name, func(t *testing.T) {
			var rules []map[string]any
			var monitor *unstructured.Unstructured
			var services []*unstructured.Unstructured
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
					monitor = o
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
				m := operatorDownJob.FindStringSubmatch(r["expr"].(string))
				if m == nil {
					t.Errorf("a KargoLatchDown for no one job: %v", r["expr"])
					continue
				}
				got[m[1]], _ = r["labels"].(map[string]any)["shard"].(string)
			}
			if !maps.Equal(got, tc.want) {
				t.Errorf("KargoLatchDown shard by job %v, want %v", got, tc.want)
			}
			// The jobs are the Services the ServiceMonitor scrapes, and each
			// rule's shard is its Service's.
			selector, _, _ := unstructured.NestedStringMap(monitor.Object, "spec", "selector", "matchLabels")
			var scraped []string
			for _, s := range services {
				if labels.SelectorFromSet(selector).Matches(labels.Set(s.GetLabels())) {
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
