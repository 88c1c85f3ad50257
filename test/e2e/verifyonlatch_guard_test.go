package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/kargo-latch/kargo-latch/test/cluster"
)

var analysisRuns = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "analysisruns"}

// TestVerifyOnLatchGuard: the opt-in verify-on-latch component, built in an
// overlay that moves it to a project namespace of the test's own (so its
// guard follows that ServiceAccount, as an overlay's would), lets the
// operator's identity create only AnalysisRuns carrying Kargo's two labels
// and kargo-latch's marker, and change only spec.terminate (to true) of its
// own runs; never a run of someone else's, another spec field, a label, the
// status, nor terminate back to false. RBAC gives it no delete. Tried on the
// real apiserver with Argo Rollouts' AnalysisRun CRD.
func TestVerifyOnLatchGuard(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	tag := randomTag()
	prefix := "e2e-" + tag + "-"
	dir := t.TempDir()
	base, err := filepath.Rel(dir, filepath.Join(env.cluster.Root, "manifests", "base"))
	must(t, err)
	component, err := filepath.Rel(dir, filepath.Join(env.cluster.Root, "manifests", "components", "verify-on-latch"))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"+
		"namespace: "+ns+"\nnamePrefix: "+prefix+"\nresources: ["+jsonString(base)+"]\ncomponents: ["+jsonString(component)+"]\n"), 0o600))
	objs, err := cluster.Kustomize(dir)
	must(t, err)
	var install, policies []*unstructured.Unstructured
	sa := prefix + "kargo-latch"
	for _, o := range objs {
		switch o.GetKind() + "/" + strings.TrimPrefix(o.GetName(), prefix) {
		case "ServiceAccount/kargo-latch",
			"ClusterRole/kargo-latch-verify-on-latch", "ClusterRoleBinding/kargo-latch-verify-on-latch":
			install = append(install, o)
		case "ValidatingAdmissionPolicy/kargo-latch-verify-on-latch-only",
			"ValidatingAdmissionPolicyBinding/kargo-latch-verify-on-latch-only",
			"ValidatingAdmissionPolicy/kargo-latch-verify-on-latch-marker",
			"ValidatingAdmissionPolicyBinding/kargo-latch-verify-on-latch-marker":
			policies = append(policies, o)
		}
	}
	if len(install) != 3 || len(policies) != 4 {
		t.Fatalf("the component's build lacks its rights or its guard: %d and %d objects", len(install), len(policies))
	}
	must(t, applyObjects(install))
	t.Cleanup(func() {
		bg := context.Background()
		_ = env.kube.RbacV1().ClusterRoleBindings().Delete(bg, prefix+"kargo-latch-verify-on-latch", metav1.DeleteOptions{})
		_ = env.kube.RbacV1().ClusterRoles().Delete(bg, prefix+"kargo-latch-verify-on-latch", metav1.DeleteOptions{})
	})
	isolatePolicies(t, tag, policies)
	isolateNamespace(t, ns, tag)
	guard := prefix + "kargo-latch-verify-on-latch-only"

	operator, err := env.cluster.ServiceAccountConfig(ctx, ns, sa)
	must(t, err)
	asOperator := dynamic.NewForConfigOrDie(operator).Resource(analysisRuns).Namespace(ns)
	asAdmin := env.dyn.Resource(analysisRuns).Namespace(ns)

	ours := map[string]string{
		"kargo.akuity.io/stage":              "test",
		"kargo.akuity.io/freight-collection": "abc123",
		"kargo-latch.io/started-by":          "kargo-latch",
	}
	without := func(key string) map[string]string {
		l := map[string]string{}
		for k, v := range ours {
			if k != key {
				l[k] = v
			}
		}
		return l
	}
	// First the guard is seen live (a dry run, which admission judges all
	// the same), so that no refusal below is RBAC's or a stale policy's.
	dryRun := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	waitDeniedBy(t, "the guard to refuse a run without kargo-latch's marker", guard, func() error {
		_, err := asOperator.Create(ctx, analysisRun("unmarked", without("kargo-latch.io/started-by")), dryRun)
		return err
	})
	for name, labels := range map[string]map[string]string{
		"no-marker":     without("kargo-latch.io/started-by"),
		"no-stage":      without("kargo.akuity.io/stage"),
		"no-collection": without("kargo.akuity.io/freight-collection"),
		"other-marker":  func() map[string]string { l := without(""); l["kargo-latch.io/started-by"] = "someone"; return l }(),
	} {
		if _, err := asOperator.Create(ctx, analysisRun(name, labels), metav1.CreateOptions{}); !deniedBy(err, guard) {
			t.Errorf("creating a run %s: %v, want refused by %s", name, err, guard)
		}
	}
	var mine *unstructured.Unstructured
	waitFor(t, "the operator to create a run in Kargo's shape with its marker", func() bool {
		mine, err = asOperator.Create(ctx, analysisRun("test.latch-0123456789.abc123", ours), metav1.CreateOptions{})
		return err == nil // its RBAC may take a moment
	})
	kargos, err := asAdmin.Create(ctx, analysisRun("test.01kargo.abc123", without("kargo-latch.io/started-by")), metav1.CreateOptions{})
	must(t, err)

	// Nobody else may mark a run as kargo-latch's (it would adopt it, and
	// mark Freight verified on its result): not at create, not later.
	marker := prefix + "kargo-latch-verify-on-latch-marker"
	if _, err := asAdmin.Create(ctx, analysisRun("test.planted.abc123", ours), metav1.CreateOptions{}); !deniedBy(err, marker) {
		t.Errorf("a person creating a run with kargo-latch's marker: %v, want refused by %s", err, marker)
	}
	b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": map[string]any{"kargo-latch.io/started-by": "kargo-latch"}}})
	if _, err := asAdmin.Patch(ctx, kargos.GetName(), types.MergePatchType, b, metav1.PatchOptions{}); !deniedBy(err, marker) {
		t.Errorf("a person marking Kargo's run as kargo-latch's: %v, want refused by %s", err, marker)
	}
	// Nor in a namespace that is no Kargo project's, for the operator.
	other := env.newProject(t)
	_, err = env.kube.CoreV1().Namespaces().Patch(ctx, other, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"kargo.akuity.io/project":null}}}`), metav1.PatchOptions{})
	must(t, err)
	isolateNamespace(t, other, tag)
	// Admission reads the namespace's labels from a cache of its own, which
	// may not show the label's removal yet: the refusal must come.
	elsewhere := dynamic.NewForConfigOrDie(operator).Resource(analysisRuns).Namespace(other)
	waitDeniedBy(t, "the guard to refuse the operator a run outside a project", guard, func() error {
		_, err := elsewhere.Create(ctx, analysisRun("elsewhere", ours), dryRun)
		return err
	})

	patch := func(name string, body map[string]any) error {
		b, _ := json.Marshal(body)
		_, err := asOperator.Patch(ctx, name, types.MergePatchType, b, metav1.PatchOptions{})
		return err
	}
	terminate := map[string]any{"spec": map[string]any{"terminate": true}}
	if err := patch(kargos.GetName(), terminate); !deniedBy(err, guard) {
		t.Errorf("terminating Kargo's run: %v, want refused by %s", err, guard)
	}
	for what, body := range map[string]map[string]any{
		"another spec field": {"spec": map[string]any{"terminate": true, "args": []any{map[string]any{"name": "x", "value": "y"}}}},
		"a label":            {"metadata": map[string]any{"labels": map[string]any{"kargo.akuity.io/freight-collection": "other"}}},
		"its marker":         {"metadata": map[string]any{"labels": map[string]any{"kargo-latch.io/started-by": nil}}},
		"an annotation":      {"metadata": map[string]any{"annotations": map[string]any{"e2e": "x"}}},
		"its status":         {"status": map[string]any{"phase": "Successful"}},
	} {
		if err := patch(mine.GetName(), body); !deniedBy(err, guard) {
			t.Errorf("changing %s of its own run: %v, want refused by %s", what, err, guard)
		}
	}
	must(t, patch(mine.GetName(), terminate))
	if err := patch(mine.GetName(), map[string]any{"spec": map[string]any{"terminate": false}}); !deniedBy(err, guard) {
		t.Errorf("unsetting terminate of its own run: %v, want refused by %s", err, guard)
	}
	got, err := asAdmin.Get(ctx, mine.GetName(), metav1.GetOptions{})
	must(t, err)
	if on, _, _ := unstructured.NestedBool(got.Object, "spec", "terminate"); !on {
		t.Errorf("its run's spec.terminate is %v after the allowed patch", on)
	}
	if err := asOperator.Delete(ctx, mine.GetName(), metav1.DeleteOptions{}); !apierrors.IsForbidden(err) || deniedBy(err, guard) {
		t.Errorf("deleting its own run: %v, want Forbidden by RBAC", err)
	}

	// The rights themselves: nothing beyond the component's list.
	for a, want := range map[authorizationv1.ResourceAttributes]bool{
		{Namespace: ns, Verb: "create", Group: "argoproj.io", Resource: "analysisruns"}:                       true,
		{Namespace: ns, Verb: "patch", Group: "argoproj.io", Resource: "analysisruns"}:                        true,
		{Namespace: ns, Verb: "update", Group: "argoproj.io", Resource: "analysisruns"}:                       false,
		{Namespace: ns, Verb: "delete", Group: "argoproj.io", Resource: "analysisruns"}:                       false,
		{Namespace: ns, Verb: "watch", Group: "argoproj.io", Resource: "analysistemplates"}:                   true,
		{Namespace: ns, Verb: "create", Group: "argoproj.io", Resource: "analysistemplates"}:                  false,
		{Verb: "get", Group: "argoproj.io", Resource: "clusteranalysistemplates"}:                             true,
		{Namespace: ns, Verb: "get", Group: "kargo.akuity.io", Resource: "freights"}:                          true,
		{Namespace: ns, Verb: "get", Group: "kargo.akuity.io", Resource: "warehouses"}:                        true,
		{Namespace: ns, Verb: "list", Group: "kargo.akuity.io", Resource: "warehouses"}:                       false,
		{Namespace: ns, Verb: "patch", Group: "kargo.akuity.io", Resource: "freights", Subresource: "status"}: false,
	} {
		sar, err := env.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
			Spec: authorizationv1.SubjectAccessReviewSpec{
				User:               "system:serviceaccount:" + ns + ":" + sa,
				Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
				ResourceAttributes: &a,
			},
		}, metav1.CreateOptions{})
		must(t, err)
		if sar.Status.Allowed != want {
			t.Errorf("with the verify-on-latch component, the operator may %s %s/%s: %v, want %v", a.Verb, a.Resource, a.Subresource, sar.Status.Allowed, want)
		}
	}
}

// analysisRun is an AnalysisRun no analysis controller runs (an instance
// ID none has), with one web metric.
func analysisRun(name string, labels map[string]string) *unstructured.Unstructured {
	l := map[string]any{"argo-rollouts.argoproj.io/controller-instance-id": "e2e-guard-none"}
	for k, v := range labels {
		l[k] = v
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "argoproj.io/v1alpha1",
		"kind":       "AnalysisRun",
		"metadata":   map[string]any{"name": name, "labels": l},
		"spec": map[string]any{
			"metrics": []any{map[string]any{
				"name":     "up",
				"provider": map[string]any{"web": map[string]any{"url": "http://127.0.0.1:1/"}},
			}},
		},
	}}
}
