package e2e

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/test/cluster"
)

// TestManifestsBuildAndPassServerSideDryRun builds every kustomization,
// every component (on top of the base) and every example, and sends each object to the real
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
	examples, err := filepath.Glob(filepath.Join(root, "examples", "*"))
	must(t, err)
	for _, e := range examples {
		builds["examples/"+filepath.Base(e)] = e
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
	if out, err := exec.Command(prometheusTool(t, "promtool"), "check", "rules", f).CombinedOutput(); err != nil {
		t.Errorf("promtool check rules on the PrometheusRule: %v\n%s", err, out)
	}
}

func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

func ptrTo[T any](v T) *T { return &v }

// TestOperatorGuardFollowsKustomizeNamespace: an overlay that moves the
// install to another namespace (and renames it) yields a metadata-only
// guard for the operator's ServiceAccount there, and nothing in the build
// still names the shipped namespace. On the real apiserver, that guard
// refuses a Stage spec change by the moved identity, and lets the same
// ServiceAccount name in another namespace through: it keys on the
// identity the overlay made, not on a name written out.
func TestOperatorGuardFollowsKustomizeNamespace(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	tag := randomTag()
	prefix := "e2e-" + tag + "-"
	dir := t.TempDir()
	def, err := filepath.Rel(dir, filepath.Join(env.cluster.Root, "manifests", "default"))
	must(t, err)
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: " + ns + "\nnamePrefix: " + prefix + "\nresources: [" + jsonString(def) + "]\n"
	must(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o600))
	objs, err := cluster.Kustomize(dir)
	must(t, err)

	sa := prefix + "kargo-latch"
	var guard, binding, account, role, roleBinding *unstructured.Unstructured
	for _, o := range objs {
		b, err := json.Marshal(o.Object)
		must(t, err)
		if strings.Contains(string(b), "serviceaccount:kargo-latch:") || strings.Contains(string(b), `"namespace":"kargo-latch"`) {
			t.Errorf("%s %s still names the shipped namespace: %s", o.GetKind(), o.GetName(), b)
		}
		switch o.GetKind() + "/" + strings.TrimPrefix(o.GetName(), prefix) {
		case "ValidatingAdmissionPolicy/kargo-latch-metadata-only":
			guard = o
		case "ValidatingAdmissionPolicyBinding/kargo-latch-metadata-only":
			binding = o
		case "ServiceAccount/kargo-latch":
			account = o
		case "ClusterRole/kargo-latch":
			role = o
		case "ClusterRoleBinding/kargo-latch":
			roleBinding = o
		}
	}
	if guard == nil || binding == nil || account == nil || role == nil || roleBinding == nil {
		t.Fatalf("the build lacks the guard, its binding, the ServiceAccount or its RBAC")
	}
	ref, _, _ := unstructured.NestedStringMap(binding.Object, "spec", "paramRef")
	if ref["name"] != sa || ref["namespace"] != ns || account.GetName() != sa || account.GetNamespace() != ns {
		t.Fatalf("the guard's paramRef is %v, the ServiceAccount %s/%s; want both %s/%s", ref, account.GetNamespace(), account.GetName(), ns, sa)
	}

	// On the apiserver: the moved operator, its RBAC and its guard (the
	// shipped guard keeps guarding kargo-latch/kargo-latch meanwhile).
	must(t, applyObjects([]*unstructured.Unstructured{account, role, roleBinding, guard, binding}))
	t.Cleanup(func() {
		bg := context.Background()
		_ = env.dyn.Resource(vapBindings).Delete(bg, binding.GetName(), metav1.DeleteOptions{})
		_ = env.dyn.Resource(vaPolicies).Delete(bg, guard.GetName(), metav1.DeleteOptions{})
		_ = env.kube.RbacV1().ClusterRoleBindings().Delete(bg, roleBinding.GetName(), metav1.DeleteOptions{})
		_ = env.kube.RbacV1().ClusterRoles().Delete(bg, role.GetName(), metav1.DeleteOptions{})
	})
	moved, err := env.cluster.ServiceAccountConfig(ctx, ns, sa)
	must(t, err)
	asMoved := dynamic.NewForConfigOrDie(moved).Resource(kargo.StagesResource).Namespace(ns)
	env.createStage(t, ns, "prod", nil)
	specChange := []byte(`{"spec":{"shard":"elsewhere"}}`)
	var denied error
	// Dry runs until the guard is live (admission runs all the same), so an
	// early try changes nothing; then the real write.
	dryRun := metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}
	waitDeniedBy(t, "the moved guard to refuse the moved operator's Stage spec change", guard.GetName(), func() error {
		_, err := asMoved.Patch(ctx, "prod", types.MergePatchType, specChange, dryRun)
		return err
	})
	if _, denied = asMoved.Patch(ctx, "prod", types.MergePatchType, specChange, metav1.PatchOptions{}); !deniedBy(denied, guard.GetName()) {
		t.Fatalf("the moved operator's Stage spec change: %v, want refused by %s", denied, guard.GetName())
	}
	if !strings.Contains(denied.Error(), "kargo-latch may change only the metadata") {
		t.Errorf("denial %q", denied)
	}
	if _, err := asMoved.Patch(ctx, "prod", types.MergePatchType, []byte(`{"metadata":{"labels":{"e2e":"ok"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("the moved operator changing metadata: %v, want allowed", err)
	}

	// The same ServiceAccount name in another namespace, with the same
	// rights, is not the operator: the guard (shown live above) lets its
	// spec change through.
	elsewhere := env.newProject(t)
	must(t, applyObjects([]*unstructured.Unstructured{
		{Object: map[string]any{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": map[string]any{"name": sa, "namespace": elsewhere}}},
		{Object: map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
			"metadata": map[string]any{"name": prefix + "elsewhere"},
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role.GetName()},
			"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": sa, "namespace": elsewhere}},
		}},
	}))
	t.Cleanup(func() {
		_ = env.kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), prefix+"elsewhere", metav1.DeleteOptions{})
	})
	impostor, err := env.cluster.ServiceAccountConfig(ctx, elsewhere, sa)
	must(t, err)
	waitFor(t, "the same name in another namespace to change the Stage's spec", func() bool {
		_, err := dynamic.NewForConfigOrDie(impostor).Resource(kargo.StagesResource).Namespace(ns).
			Patch(ctx, "prod", types.MergePatchType, specChange, metav1.PatchOptions{})
		if deniedBy(err, guard.GetName()) {
			t.Fatalf("the guard refused %s/%s, which is not the operator: %v", elsewhere, sa, err)
		}
		return err == nil // RBAC may take a moment
	})
}
