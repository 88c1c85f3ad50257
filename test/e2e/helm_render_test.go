package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kargo-latch/kargo-latch/test/cluster"
)

// componentToggles are the chart values that stand for each kustomize
// component, added to manifests/default. Each component must have one.
var componentToggles = map[string][]string{
	"gate-people":                          {"pauseGate.people.enabled=true"},
	"resume-requires-projectconfig-update": {"resumeRequiresProjectConfigUpdate.enabled=true"},
	"mark-verified":                        {"markVerified.installRights=true"},
	"verify-on-latch":                      {"verifyOnLatch.installRights=true"},
	"monitoring":                           {"controller.metrics.serviceMonitor.enabled=true", "prometheusRule.enabled=true"},
	"grafana-dashboard":                    {"grafanaDashboard.enabled=true"},
	"requested-by":                         {"pauseGate.requestedBy.enabled=true"},
}

// exampleValues are the chart values that render each kustomize example of
// manifests/examples, a whole install. Each example must have them.
var exampleValues = map[string][]string{
	"shards":            {"controller.shards={eu}"},
	"shards-monitoring": {"controller.shards={eu}", "controller.metrics.serviceMonitor.enabled=true", "prometheusRule.enabled=true"},
}

// TestChartRendersTheKustomizeInstall: `helm template` with the default
// values renders the objects `kubectl kustomize manifests/default` builds,
// and with each opt-in toggle, those of manifests/default plus the
// component; with the pause gate off, those of manifests/base; and with
// the values of each example of manifests/examples, that example. The
// comparison is of parsed objects, with three differences allowed and no
// other:
//   - the kustomize install's Namespace is not rendered: `helm install
//     --create-namespace` makes it (a chart that renders its own namespace
//     cannot be installed into it);
//   - Helm's standard labels (helm.sh/chart, app.kubernetes.io/{name,
//     instance,version,managed-by}) and the CRD's helm.sh/resource-policy
//     annotation, wherever the kustomize object lacks them: in metadata,
//     and in the Deployment's and Service's selectors (the release label);
//   - whitespace within a CEL expression (expression, messageExpression):
//     kustomize's YAML parser keeps one more line break than Helm's (and
//     the apiserver's) where a folded scalar (>-) has a more-indented line.
func TestChartRendersTheKustomizeInstall(t *testing.T) {
	t.Parallel()
	root := filepath.Join(env.cluster.Root, "manifests")
	type install struct {
		kustomize string   // the kustomization
		sets      []string // the chart's values that match it
	}
	cases := map[string]install{
		"default":        {kustomize: filepath.Join(root, "default")},
		"pause gate off": {kustomize: filepath.Join(root, "base"), sets: []string{"pauseGate.enabled=false"}},
	}
	components, err := filepath.Glob(filepath.Join(root, "components", "*"))
	must(t, err)
	for _, c := range components {
		name := filepath.Base(c)
		if partOfDefault[name] {
			continue
		}
		sets, ok := componentToggles[name]
		if !ok {
			t.Errorf("the kustomize component %s has no toggle in the chart (componentToggles)", name)
			continue
		}
		cases["default+"+name] = install{overlay(t, filepath.Join(root, "default"), c), sets}
	}
	examples, err := filepath.Glob(filepath.Join(root, "examples", "*"))
	must(t, err)
	if len(examples) == 0 {
		t.Error("found no example in manifests/examples")
	}
	for _, e := range examples {
		name := filepath.Base(e)
		sets, ok := exampleValues[name]
		if !ok {
			t.Errorf("the kustomize example %s has no chart values (exampleValues)", name)
			continue
		}
		cases["example "+name] = install{e, sets}
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			want, err := cluster.Kustomize(tc.kustomize)
			must(t, err)
			got := renderChart(t, "kargo-latch", "kargo-latch", append(setFlags(tc.sets), "--api-versions", mutatingPolicyAPI)...)
			compareInstalls(t, got, want)
		})
	}
	// A cluster without MutatingAdmissionPolicy (Kubernetes before 1.36):
	// the chart's defaults are still plain manifests/default, which holds
	// no mutating policy either (the requester mark is opt-in on both).
	t.Run("default on Kubernetes 1.30", func(t *testing.T) {
		want, err := cluster.Kustomize(filepath.Join(root, "default"))
		must(t, err)
		got := renderChart(t, "kargo-latch", "kargo-latch", "--kube-version", "1.30.0")
		compareInstalls(t, got, want)
		for _, o := range want {
			if strings.HasPrefix(o.GetKind(), "MutatingAdmissionPolicy") {
				t.Errorf("manifests/default holds %s %s, which Kubernetes before 1.36 does not know", o.GetKind(), o.GetName())
			}
		}
	})
}

// partOfDefault are the kustomize components manifests/default includes.
var partOfDefault = map[string]bool{"pause-gate": true, "kargo-controllers": true}

// overlay writes a kustomization of base plus component, and returns its
// directory.
func overlay(t *testing.T, base, component string) string {
	t.Helper()
	dir := t.TempDir()
	b, err := filepath.Rel(dir, base)
	must(t, err)
	c, err := filepath.Rel(dir, component)
	must(t, err)
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [" + jsonString(b) +
		"]\ncomponents: [" + jsonString(c) + "]\n"
	must(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o600))
	return dir
}
