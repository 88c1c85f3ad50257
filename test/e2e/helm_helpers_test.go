package e2e

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kargo-latch/kargo-latch/test/cluster"
)

// The chart's tests: it renders what the kustomize install builds
// (helm_render_test.go), every object it renders passes the apiserver's
// validation (helm_dryrun_test.go), its defaults are the operator's
// (helm_defaults_test.go), and an install from it pauses a Stage
// (helm_install_test.go). `make chart` lints it. This file holds what they
// share: running helm and comparing its objects with kustomize's.

const chartPath = "charts/kargo-latch"

// helmOnly are the keys Helm adds that the kustomize install may lack.
var helmOnly = map[string]bool{
	"helm.sh/chart":                true,
	"app.kubernetes.io/name":       true,
	"app.kubernetes.io/instance":   true,
	"app.kubernetes.io/version":    true,
	"app.kubernetes.io/managed-by": true,
	"helm.sh/resource-policy":      true,
}

// celKeys hold CEL expressions in admission policies.
var celKeys = map[string]bool{"expression": true, "messageExpression": true}

// compareInstalls reports every object only one side has, and every
// difference of the objects both have, after the allowed differences.
func compareInstalls(t *testing.T, rendered, built []*unstructured.Unstructured) {
	t.Helper()
	byKey := func(objs []*unstructured.Unstructured) map[string]map[string]any {
		m := map[string]map[string]any{}
		for _, o := range objs {
			if o.GetKind() == "Namespace" {
				continue // made by `helm install --create-namespace`
			}
			m[o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName()] = canonical(t, o)
		}
		return m
	}
	got, want := byKey(rendered), byKey(built)
	for key, w := range want {
		g, ok := got[key]
		if !ok {
			t.Errorf("the chart does not render %s", key)
			continue
		}
		dropHelmOnly(g, w)
		if diff := cmp.Diff(w, g); diff != "" {
			t.Errorf("%s differs (-kustomize +helm):\n%s", key, diff)
		}
	}
	for key := range got {
		if _, ok := want[key]; !ok {
			t.Errorf("the chart renders %s, which kustomize does not build", key)
		}
	}
}

// canonical is an object as JSON decodes it (integers as int64), whichever
// YAML it was read from.
func canonical(t *testing.T, o *unstructured.Unstructured) map[string]any {
	t.Helper()
	b, err := json.Marshal(o.Object)
	must(t, err)
	u := &unstructured.Unstructured{}
	must(t, u.UnmarshalJSON(b))
	return u.Object
}

// dropHelmOnly removes from got, recursively, the helmOnly keys that want
// lacks at the same place, and the maps that held nothing else; and takes
// want's CEL expressions where got's differ only in whitespace.
func dropHelmOnly(got, want map[string]any) {
	for k, v := range got {
		w, inWant := want[k]
		if helmOnly[k] && !inWant {
			delete(got, k)
			continue
		}
		switch v := v.(type) {
		case string:
			if ws, ok := w.(string); ok && celKeys[k] && strings.Join(strings.Fields(v), " ") == strings.Join(strings.Fields(ws), " ") {
				got[k] = ws
			}
		case map[string]any:
			wm, _ := w.(map[string]any)
			dropHelmOnly(v, wm)
			if len(v) == 0 && !inWant {
				delete(got, k)
			}
		case []any:
			wl, _ := w.([]any)
			for i := range min(len(v), len(wl)) {
				gm, ok1 := v[i].(map[string]any)
				wm, ok2 := wl[i].(map[string]any)
				if ok1 && ok2 {
					dropHelmOnly(gm, wm)
				}
			}
		}
	}
}

// renderChart runs `helm template` with more flags, and returns the
// objects it renders.
func renderChart(t *testing.T, release, namespace string, flags ...string) []*unstructured.Unstructured {
	t.Helper()
	args := append([]string{"template", release, filepath.Join(env.cluster.Root, chartPath), "--namespace", namespace}, flags...)
	out := runHelm(t, t.TempDir(), args...)
	f := filepath.Join(t.TempDir(), "rendered.yaml")
	must(t, os.WriteFile(f, out, 0o600))
	objs, err := cluster.ReadObjects(f)
	must(t, err)
	return objs
}

// runHelm runs bin/helm with home for its files and returns its standard
// output; it fails the test on an error.
func runHelm(t *testing.T, home string, args ...string) []byte {
	t.Helper()
	if _, err := os.Stat(helmBinary()); err != nil {
		t.Fatalf("%v: run `make chart`, which builds helm from Go modules into bin/", err)
	}
	cmd := helmCommand(home, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helm %s: %v\n%s", strings.Join(args, " "), err, stderr.Bytes())
	}
	return out
}

func helmBinary() string { return filepath.Join(env.cluster.Root, "bin", "helm") }

// helmCommand is bin/helm with its cache, configuration and data in home,
// out of the user's.
func helmCommand(home string, args ...string) *exec.Cmd {
	cmd := exec.Command(helmBinary(), args...)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"))
	return cmd
}

// setFlags are helm's flags that set each value of sets ("key=value").
func setFlags(sets []string) []string {
	var flags []string
	for _, s := range sets {
		flags = append(flags, "--set", s)
	}
	return flags
}
