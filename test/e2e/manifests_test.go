package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/kargo-latch/kargo-latch/test/cluster"
)

// TestManifestsBuildAndPassServerSideDryRun builds every kustomization and
// every component (on top of the base) and sends each object to the real
// apiserver as a server-side apply dry run. Kinds whose CRDs the test
// cluster lacks (ServiceMonitor, PrometheusRule) are decoded, and the
// PrometheusRule's rules are checked with promtool.
func TestManifestsBuildAndPassServerSideDryRun(t *testing.T) {
	t.Parallel()
	root := filepath.Join(env.cluster.Root, "manifests")
	builds := map[string]string{
		"crds":    filepath.Join(root, "crds"),
		"base":    filepath.Join(root, "base"),
		"default": filepath.Join(root, "default"),
	}
	components, err := filepath.Glob(filepath.Join(root, "components", "*"))
	must(t, err)
	for _, c := range components {
		overlay := t.TempDir()
		base, err := filepath.Rel(overlay, filepath.Join(root, "base"))
		must(t, err)
		comp, err := filepath.Rel(overlay, c)
		must(t, err)
		k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [" + jsonString(base) +
			"]\ncomponents: [" + jsonString(comp) + "]\n"
		must(t, os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(k), 0o600))
		builds["base+"+filepath.Base(c)] = overlay
	}
	if len(components) < 4 {
		t.Fatalf("found %d components, want at least the pause gate, the two opt-in policies and monitoring", len(components))
	}

	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(discovery.NewDiscoveryClientForConfigOrDie(env.cluster.Config)))
	for name, dir := range builds {
		t.Run(name, func(t *testing.T) {
			objs, err := cluster.Kustomize(dir)
			must(t, err)
			if len(objs) == 0 {
				t.Fatal("built no objects")
			}
			for _, o := range objs {
				switch o.GetKind() {
				case "ServiceMonitor":
					continue // decoded by the build; its CRD is not installed here
				case "PrometheusRule":
					checkPrometheusRule(t, o)
					continue
				}
				gvk := o.GroupVersionKind()
				mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
				must(t, err)
				body, err := json.Marshal(o.Object)
				must(t, err)
				r := env.dyn.Resource(mapping.Resource)
				var apply func() error
				if o.GetNamespace() != "" {
					apply = func() error {
						_, err := r.Namespace(o.GetNamespace()).Patch(ctx, o.GetName(), types.ApplyPatchType, body,
							metav1.PatchOptions{FieldManager: "e2e-dry-run", DryRun: []string{metav1.DryRunAll}, Force: ptrTo(true), FieldValidation: "Strict"})
						return err
					}
				} else {
					apply = func() error {
						_, err := r.Patch(ctx, o.GetName(), types.ApplyPatchType, body,
							metav1.PatchOptions{FieldManager: "e2e-dry-run", DryRun: []string{metav1.DryRunAll}, Force: ptrTo(true), FieldValidation: "Strict"})
						return err
					}
				}
				if err := apply(); err != nil {
					t.Errorf("server-side dry run of %s %s/%s: %v", gvk.Kind, o.GetNamespace(), o.GetName(), err)
				}
			}
		})
	}
}

func checkPrometheusRule(t *testing.T, o *unstructured.Unstructured) {
	t.Helper()
	spec, ok := o.Object["spec"].(map[string]any)
	if !ok {
		t.Fatal("PrometheusRule without spec")
	}
	b, err := yaml.Marshal(spec)
	must(t, err)
	f := filepath.Join(t.TempDir(), "rules.yaml")
	must(t, os.WriteFile(f, b, 0o600))
	if out, err := exec.Command("promtool", "check", "rules", f).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules on the PrometheusRule: %v\n%s", err, out)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func ptrTo[T any](v T) *T { return &v }
