package e2e

import (
	"context"
	"encoding/json"
	"fmt"
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
	"k8s.io/client-go/rest"

	"github.com/kargo-latch/kargo-latch/test/cluster"
)

var analysisRuns = schema.GroupVersionResource{Group: "argoproj.io", Version: "v1alpha1", Resource: "analysisruns"}

// guardFixture is the opt-in verify-on-latch component, built in an overlay
// that moves it to a project namespace of the test's own (so that its guard
// follows that ServiceAccount, as an overlay's would), and applied: the
// operator's ServiceAccount (with the component's setting), its rights and
// the two policies, bound to that namespace only. The guard is live when it
// returns.
type guardFixture struct {
	ns, prefix, tag string
	sa              string // the operator's ServiceAccount, in ns
	guard, marker   string // the policies' names
	operator        *rest.Config
	asOperator      dynamic.ResourceInterface // AnalysisRuns of ns, as the operator
	asAdmin         dynamic.ResourceInterface // the same, as the cluster's admin
}

func setUpVerifyOnLatchGuard(t *testing.T) *guardFixture {
	t.Helper()
	f := &guardFixture{ns: env.newProject(t), tag: randomTag()}
	f.prefix = "e2e-" + f.tag + "-"
	dir := t.TempDir()
	base, err := filepath.Rel(dir, filepath.Join(env.cluster.Root, "manifests", "base"))
	must(t, err)
	component, err := filepath.Rel(dir, filepath.Join(env.cluster.Root, "manifests", "components", "verify-on-latch"))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n"+
		"namespace: "+f.ns+"\nnamePrefix: "+f.prefix+"\nresources: ["+jsonString(base)+"]\ncomponents: ["+jsonString(component)+"]\n"), 0o600))
	objs, err := cluster.Kustomize(dir)
	must(t, err)
	var install, policies []*unstructured.Unstructured
	f.sa = f.prefix + "kargo-latch"
	for _, o := range objs {
		switch o.GetKind() + "/" + strings.TrimPrefix(o.GetName(), f.prefix) {
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
		_ = env.kube.RbacV1().ClusterRoleBindings().Delete(bg, f.prefix+"kargo-latch-verify-on-latch", metav1.DeleteOptions{})
		_ = env.kube.RbacV1().ClusterRoles().Delete(bg, f.prefix+"kargo-latch-verify-on-latch", metav1.DeleteOptions{})
	})
	isolatePolicies(t, f.tag, policies)
	isolateNamespace(t, f.ns, f.tag)
	f.guard = f.prefix + "kargo-latch-verify-on-latch-only"
	f.marker = f.prefix + "kargo-latch-verify-on-latch-marker"

	f.operator, err = env.cluster.ServiceAccountConfig(ctx, f.ns, f.sa)
	must(t, err)
	f.asOperator = dynamic.NewForConfigOrDie(f.operator).Resource(analysisRuns).Namespace(f.ns)
	f.asAdmin = env.dyn.Resource(analysisRuns).Namespace(f.ns)
	// First the guard is seen live (a dry run, which admission judges all
	// the same), so that no refusal after it is RBAC's or a stale policy's.
	waitDeniedBy(t, "the guard to refuse a run without kargo-latch's marker", f.guard, func() error {
		_, err := f.asOperator.Create(ctx, analysisRun("unmarked", without(ourLabels, "kargo-latch.io/started-by")), dryRunCreate)
		return err
	})
	return f
}

// create creates a run as the operator, once its RBAC has reached the API
// server's cache (which may take a moment after the install).
func (f *guardFixture) create(t *testing.T, what string, run *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	var got *unstructured.Unstructured
	var err error
	waitFor(t, "the operator to create "+what, func() bool {
		got, err = f.asOperator.Create(ctx, run, metav1.CreateOptions{})
		return err == nil
	})
	return got
}

// patch merge-patches the run named as the operator.
func (f *guardFixture) patch(name string, body map[string]any) error {
	b, _ := json.Marshal(body)
	_, err := f.asOperator.Patch(ctx, name, types.MergePatchType, b, metav1.PatchOptions{})
	return err
}

// ourLabels are those of a run in Kargo's shape that kargo-latch made.
var ourLabels = map[string]string{
	"kargo.akuity.io/stage":              "test",
	"kargo.akuity.io/freight-collection": "abc123",
	"kargo-latch.io/started-by":          "kargo-latch",
}

// without is labels without key.
func without(labels map[string]string, key string) map[string]string {
	l := map[string]string{}
	for k, v := range labels {
		if k != key {
			l[k] = v
		}
	}
	return l
}

var dryRunCreate = metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}

// deniedWith tells whether err is the guard's denial, saying message.
func deniedWith(err error, policy, message string) bool {
	return deniedBy(err, policy) && strings.Contains(err.Error(), message)
}

// TestVerifyOnLatchGuard: the opt-in verify-on-latch component lets the
// operator's identity create only AnalysisRuns carrying Kargo's two labels
// and kargo-latch's marker, and change only spec.terminate (to true) of its
// own runs; never a run of someone else's, another spec field, a label, the
// status, nor terminate back to false. RBAC gives it no delete. Tried on the
// real apiserver with Argo Rollouts' AnalysisRun CRD.
func TestVerifyOnLatchGuard(t *testing.T) {
	t.Parallel()
	f := setUpVerifyOnLatchGuard(t)
	ns, sa, guard, operator, asOperator, asAdmin, tag := f.ns, f.sa, f.guard, f.operator, f.asOperator, f.asAdmin, f.tag
	ours := ourLabels
	for name, labels := range map[string]map[string]string{
		"no-marker":     without(ours, "kargo-latch.io/started-by"),
		"no-stage":      without(ours, "kargo.akuity.io/stage"),
		"no-collection": without(ours, "kargo.akuity.io/freight-collection"),
		"other-marker":  func() map[string]string { l := without(ours, ""); l["kargo-latch.io/started-by"] = "someone"; return l }(),
	} {
		if _, err := asOperator.Create(ctx, analysisRun(name, labels), metav1.CreateOptions{}); !deniedBy(err, guard) {
			t.Errorf("creating a run %s: %v, want refused by %s", name, err, guard)
		}
	}
	mine := f.create(t, "a run in Kargo's shape with its marker", analysisRun("test.latch-0123456789.abc123", ours))
	kargos, err := asAdmin.Create(ctx, analysisRun("test.01kargo.abc123", without(ours, "kargo-latch.io/started-by")), metav1.CreateOptions{})
	must(t, err)

	// Nobody else may mark a run as kargo-latch's (it would adopt it, and
	// mark Freight verified on its result): not at create, not later.
	marker := f.marker
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
		_, err := elsewhere.Create(ctx, analysisRun("elsewhere", ours), dryRunCreate)
		return err
	})

	patch := f.patch
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
	// Still in Kargo's lookup, its run is not terminated: Argo Rollouts
	// would end it Successful, and Kargo adopt it.
	if err := patch(mine.GetName(), terminate); !deniedBy(err, guard) {
		t.Errorf("terminating its own run still in Kargo's lookup: %v, want refused by %s", err, guard)
	}
	l := mine.GetLabels()
	must(t, patch(mine.GetName(), map[string]any{"metadata": map[string]any{
		"labels": map[string]any{"kargo.akuity.io/stage": nil, "kargo.akuity.io/freight-collection": nil,
			"kargo-latch.io/stage": l["kargo.akuity.io/stage"], "kargo-latch.io/freight-collection": l["kargo.akuity.io/freight-collection"]},
		"annotations": map[string]any{"kargo-latch.io/cut-short": "the cycle failed", "kargo-latch.io/cut-short-at": "2026-12-07T10:00:00Z"},
	}}))
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

// The guard's messages for a change of the operator's own run.
const (
	guardLabelsMessage      = "kargo-latch may change the labels of its AnalysisRun only by moving"
	guardAnnotationsMessage = "kargo-latch may change the annotations of its AnalysisRun only by adding"
	guardSpecMessage        = "kargo-latch may change an AnalysisRun's spec only by setting spec.terminate to true"
)

// cutShort is the operator's patch that takes its run out of Kargo's lookup
// (Argo Rollouts ends a terminated run Successful, which Kargo must never
// adopt): Kargo's two labels move to kargo-latch's keys, values unchanged,
// and two annotations say why and when. edit changes it before it is sent.
func cutShort(edit func(labels, annotations, patch map[string]any)) map[string]any {
	labels := map[string]any{
		"kargo.akuity.io/stage":              nil,
		"kargo.akuity.io/freight-collection": nil,
		"kargo-latch.io/stage":               "test",
		"kargo-latch.io/freight-collection":  "abc123",
	}
	annotations := map[string]any{
		"kargo-latch.io/cut-short":    "the cycle failed: Stage test was Unhealthy past the degraded grace",
		"kargo-latch.io/cut-short-at": "2026-12-07T10:00:00Z",
	}
	patch := map[string]any{"metadata": map[string]any{"labels": labels, "annotations": annotations}}
	if edit != nil {
		edit(labels, annotations, patch)
	}
	return patch
}

// TestVerifyOnLatchGuardCutShort: the operator may take a run of its own
// out of Kargo's lookup before it terminates it, by exactly the cut-short
// patch (with or without spec.terminate in the same patch), and terminate
// it afterwards; every variant outside it is refused with the guard's
// message: other values while moving, one label only, the marker, another
// annotation or label, no reason, a time that is not RFC 3339, another
// spec field, and, on a run cut short, Kargo's labels put back or the
// reason changed. Kargo's lookup then finds the run no more.
func TestVerifyOnLatchGuardCutShort(t *testing.T) {
	t.Parallel()
	f := setUpVerifyOnLatchGuard(t)
	run := f.create(t, "a run to cut short", analysisRun("test.latch-cutshort0001.abc123", ourLabels)).GetName()
	both := f.create(t, "a run to cut short and terminate at once", analysisRun("test.latch-cutshort0002.abc123", ourLabels)).GetName()

	for _, tc := range []struct {
		what    string
		patch   map[string]any
		message string
	}{
		{"moving the stage label to another value", cutShort(func(l, _, _ map[string]any) { l["kargo-latch.io/stage"] = "prod" }), guardLabelsMessage},
		{"moving the collection label to another value", cutShort(func(l, _, _ map[string]any) { l["kargo-latch.io/freight-collection"] = "def456" }), guardLabelsMessage},
		{"removing Kargo's labels without keeping them", cutShort(func(l, _, _ map[string]any) {
			delete(l, "kargo-latch.io/stage")
			delete(l, "kargo-latch.io/freight-collection")
		}), guardLabelsMessage},
		{"removing only the stage label", cutShort(func(l, _, _ map[string]any) { delete(l, "kargo.akuity.io/freight-collection") }), guardLabelsMessage},
		{"removing only the collection label", cutShort(func(l, _, _ map[string]any) { delete(l, "kargo.akuity.io/stage") }), guardLabelsMessage},
		{"removing the marker", cutShort(func(l, _, _ map[string]any) { l["kargo-latch.io/started-by"] = nil }), guardLabelsMessage},
		{"changing another label", cutShort(func(l, _, _ map[string]any) {
			l["argo-rollouts.argoproj.io/controller-instance-id"] = "e2e-other"
		}), guardLabelsMessage},
		{"adding another label", cutShort(func(l, _, _ map[string]any) { l["e2e"] = "x" }), guardLabelsMessage},
		{"adding another annotation", cutShort(func(_, a, _ map[string]any) { a["e2e"] = "x" }), guardAnnotationsMessage},
		{"moving the labels without saying why", cutShort(func(_, _, p map[string]any) {
			delete(p["metadata"].(map[string]any), "annotations")
		}), guardAnnotationsMessage},
		{"an empty reason", cutShort(func(_, a, _ map[string]any) { a["kargo-latch.io/cut-short"] = "" }), guardAnnotationsMessage},
		{"a time that is not RFC 3339", cutShort(func(_, a, _ map[string]any) { a["kargo-latch.io/cut-short-at"] = "yesterday" }), guardAnnotationsMessage},
		{"the reason without the move", cutShort(func(_, _, p map[string]any) {
			delete(p["metadata"].(map[string]any), "labels")
		}), guardAnnotationsMessage},
		{"another spec field", cutShort(func(_, _, p map[string]any) {
			p["spec"] = map[string]any{"terminate": true, "args": []any{map[string]any{"name": "x", "value": "y"}}}
		}), guardSpecMessage},
	} {
		if err := f.patch(run, tc.patch); !deniedWith(err, f.guard, tc.message) {
			t.Errorf("cutting its run short, %s: %v, want refused by %s: %q", tc.what, err, f.guard, tc.message)
		}
	}

	// The cut-short patch passes, alone or with spec.terminate.
	must(t, f.patch(run, cutShort(nil)))
	must(t, f.patch(both, cutShort(func(_, _, p map[string]any) { p["spec"] = map[string]any{"terminate": true} })))
	for _, name := range []string{run, both} {
		got, err := f.asAdmin.Get(ctx, name, metav1.GetOptions{})
		must(t, err)
		want := map[string]string{
			"kargo-latch.io/stage":                             "test",
			"kargo-latch.io/freight-collection":                "abc123",
			"kargo-latch.io/started-by":                        "kargo-latch",
			"argo-rollouts.argoproj.io/controller-instance-id": "e2e-guard-none",
		}
		if fmt.Sprint(got.GetLabels()) != fmt.Sprint(want) {
			t.Errorf("run %s cut short has the labels %v, want %v", name, got.GetLabels(), want)
		}
		if a := got.GetAnnotations(); a["kargo-latch.io/cut-short-at"] != "2026-12-07T10:00:00Z" || a["kargo-latch.io/cut-short"] == "" || len(a) != 2 {
			t.Errorf("run %s cut short has the annotations %v", name, a)
		}
	}
	// Kargo's lookup (its two labels) finds neither any more.
	lookup, err := f.asAdmin.List(ctx, metav1.ListOptions{LabelSelector: "kargo.akuity.io/stage=test,kargo.akuity.io/freight-collection=abc123"})
	must(t, err)
	if len(lookup.Items) != 0 {
		t.Errorf("Kargo's lookup still finds %d runs cut short", len(lookup.Items))
	}

	// A run already cut short: terminate passes (its labels unchanged), and
	// so does the same cut-short patch again; Kargo's labels never come back,
	// and its reason stays.
	must(t, f.patch(run, map[string]any{"spec": map[string]any{"terminate": true}}))
	must(t, f.patch(run, cutShort(func(_, _, p map[string]any) { p["spec"] = map[string]any{"terminate": true} })))
	for _, tc := range []struct {
		what    string
		patch   map[string]any
		message string
	}{
		{"putting Kargo's labels back", map[string]any{"metadata": map[string]any{"labels": map[string]any{
			"kargo.akuity.io/stage": "test", "kargo.akuity.io/freight-collection": "abc123",
		}}}, guardLabelsMessage},
		{"moving the labels back", map[string]any{"metadata": map[string]any{"labels": map[string]any{
			"kargo.akuity.io/stage": "test", "kargo.akuity.io/freight-collection": "abc123",
			"kargo-latch.io/stage": nil, "kargo-latch.io/freight-collection": nil,
		}}}, guardLabelsMessage},
		{"putting Kargo's stage label back", map[string]any{"metadata": map[string]any{"labels": map[string]any{
			"kargo.akuity.io/stage": "test",
		}}}, guardLabelsMessage},
		{"changing its kargo-latch.io/stage label", map[string]any{"metadata": map[string]any{"labels": map[string]any{
			"kargo-latch.io/stage": "prod",
		}}}, guardLabelsMessage},
		{"changing the reason", cutShort(func(_, a, _ map[string]any) { a["kargo-latch.io/cut-short"] = "another" }), guardAnnotationsMessage},
		{"changing the time", cutShort(func(_, a, _ map[string]any) { a["kargo-latch.io/cut-short-at"] = "2026-12-08T10:00:00Z" }), guardAnnotationsMessage},
		{"removing the reason", map[string]any{"metadata": map[string]any{"annotations": map[string]any{
			"kargo-latch.io/cut-short": nil,
		}}}, guardAnnotationsMessage},
		{"unsetting terminate", map[string]any{"spec": map[string]any{"terminate": false}}, guardSpecMessage},
	} {
		if err := f.patch(run, tc.patch); !deniedWith(err, f.guard, tc.message) {
			t.Errorf("on its run cut short, %s: %v, want refused by %s: %q", tc.what, err, f.guard, tc.message)
		}
	}
	got, err := f.asAdmin.Get(ctx, run, metav1.GetOptions{})
	must(t, err)
	if on, _, _ := unstructured.NestedBool(got.Object, "spec", "terminate"); !on || got.GetLabels()["kargo.akuity.io/stage"] != "" {
		t.Errorf("its run cut short: terminate %v, labels %v", on, got.GetLabels())
	}

	// Nobody else may cut short a run of Kargo's as the operator: the
	// operator may change only its own.
	kargos, err := f.asAdmin.Create(ctx, analysisRun("test.01kargo.abc123", without(ourLabels, "kargo-latch.io/started-by")), metav1.CreateOptions{})
	must(t, err)
	if err := f.patch(kargos.GetName(), cutShort(nil)); !deniedWith(err, f.guard, "kargo-latch may change only AnalysisRuns labelled kargo-latch.io/started-by=kargo-latch") {
		t.Errorf("cutting Kargo's run short: %v, want refused by %s", err, f.guard)
	}
}
