package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/kargo-latch/kargo-latch/test/cluster"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// buildOverlay builds a kustomization of its own, beside nothing, that
// uses the given shipped components (paths under manifests/) and adds
// extra (more kustomization fields, YAML).
func buildOverlay(t *testing.T, extra string, components ...string) []*unstructured.Unstructured {
	t.Helper()
	dir := t.TempDir()
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\ncomponents:\n"
	for _, c := range components {
		rel, err := filepath.Rel(dir, filepath.Join(env.cluster.Root, "manifests", c))
		must(t, err)
		k += "- " + rel + "\n"
	}
	must(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k+extra), 0o600))
	objs, err := cluster.Kustomize(dir)
	must(t, err)
	return objs
}

// isolatePolicies makes a test's copy of cluster-wide admission policies
// (validating and mutating): each binding matches only namespaces labeled
// e2e-policies=<tag>, and the objects are deleted when the test ends. The
// names must already be the test's own (namePrefix).
func isolatePolicies(t *testing.T, tag string, objs []*unstructured.Unstructured) {
	t.Helper()
	for _, o := range objs {
		if _, ok := admissionPolicies[o.GetKind()]; !ok {
			t.Fatalf("isolatePolicies: %s %s is no admission policy or binding", o.GetKind(), o.GetName())
		}
		if strings.HasSuffix(o.GetKind(), "Binding") {
			must(t, unstructured.SetNestedMap(o.Object, map[string]any{"matchLabels": map[string]any{"e2e-policies": tag}}, "spec", "matchResources", "namespaceSelector"))
		}
	}
	must(t, applyObjects(objs))
	t.Cleanup(func() {
		for _, o := range objs {
			_ = env.dyn.Resource(admissionPolicies[o.GetKind()]).Delete(context.Background(), o.GetName(), metav1.DeleteOptions{})
		}
	})
}

// admissionPolicies are the resources of the admission policies' kinds.
var admissionPolicies = map[string]schema.GroupVersionResource{
	"ValidatingAdmissionPolicy":        vaPolicies,
	"ValidatingAdmissionPolicyBinding": vapBindings,
	"MutatingAdmissionPolicy":          {Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicies"},
	"MutatingAdmissionPolicyBinding":   {Group: "admissionregistration.k8s.io", Version: "v1", Resource: "mutatingadmissionpolicybindings"},
}

// isolateNamespace puts ns under the policies isolatePolicies made for tag.
func isolateNamespace(t *testing.T, ns, tag string) {
	t.Helper()
	_, err := env.kube.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"e2e-policies":"`+tag+`"}}}`), metav1.PatchOptions{})
	must(t, err)
}

func randomTag() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// deniedBy tells whether err is a denial by the admission policy named.
func deniedBy(err error, policy string) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy '"+policy+"'")
}

// deniedByAPauseGate tells whether err is a denial by a pause gate: the
// shipped one, or a Helm release's (named <release>-pause-gate) that
// TestHelmInstallPausesAStage binds to every namespace for a moment before
// it narrows it. Where several policies refuse, the API server names one of
// them, in no fixed order.
func deniedByAPauseGate(err error) bool {
	return apierrors.IsForbidden(err) && pauseGateDenial.MatchString(err.Error())
}

var pauseGateDenial = regexp.MustCompile(`ValidatingAdmissionPolicy '(kargo-latch|kargo-latch-e2e-[0-9a-f]{8})-pause-gate'`)

// TestGatePeopleRefusesKargoAPIServer: with the opt-in gate-people
// component, a Promotion that Kargo's UI, API or CLI makes (created by
// Kargo's API server's ServiceAccount, naming the person only in
// kargo.akuity.io/create-actor) to a paused Stage is refused, although that
// ServiceAccount may update the ProjectConfig; the denial says what to do,
// and the way it names works: kubectl as a lead. Unpaused Stages, and the
// Stage after the resume, take the API server's Promotions. Patched to
// another API server identity (as the component documents), the gate
// follows it: the new identity is refused and kargo-api no longer is.
func TestGatePeopleRefusesKargoAPIServer(t *testing.T) {
	t.Parallel()
	tag := randomTag()
	prefix := "e2e-" + tag + "-"
	objs := buildOverlay(t, "namePrefix: "+prefix+"\n", "components/gate-people")
	isolatePolicies(t, tag, objs)
	apiPolicy, peoplePolicy := prefix+"kargo-latch-pause-gate-kargo-api", prefix+"kargo-latch-pause-gate-people"

	ns := env.newProject(t)
	isolateNamespace(t, ns, tag)
	env.createStage(t, ns, "prod", nil)
	env.createStage(t, ns, "dev", nil)
	kargoAPI := dynamic.NewForConfigOrDie(env.cluster.UserConfig(kargoAPIToken))
	// lead may promote here (and, installed for every test, update
	// ProjectConfigs).
	_, err := env.kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "lead-promotes"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "e2e-promoter"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "lead"}},
	}, metav1.CreateOptions{})
	must(t, err)
	const person = "email:alice@example.com"

	// The old gap: Kargo's API server may update the ProjectConfig, so a
	// check of the requester's rights lets it through.
	sar, err := env.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: kargoAPIUser, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kargo", "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Name: ns, Verb: "update", Group: kargoGroup, Resource: "projectconfigs"},
	}}, metav1.CreateOptions{})
	must(t, err)
	if !sar.Status.Allowed {
		t.Fatal("the test's Kargo API server may not update the ProjectConfig; it must, as Kargo's does, for this test to mean anything")
	}
	if _, err := driver.CreatePromotion(ctx, kargoAPI, ns, "prod", person); err != nil {
		t.Fatalf("Kargo's API server promoting to an unpaused Stage: %v", err)
	}

	must(t, createPause(env.dev, pause(ns, "hold", "prod", "Manual")))
	// The policies are live for this namespace once dev (no ProjectConfig
	// right) is refused by the people's policy.
	waitDeniedBy(t, "the people gate to refuse dev", peoplePolicy, func() error {
		_, err := driver.CreatePromotion(ctx, env.dev, ns, "prod", "kubernetes:dev")
		return err
	})
	var denied error
	waitDeniedBy(t, "the gate to refuse Kargo's API server", apiPolicy, func() error {
		_, denied = driver.CreatePromotion(ctx, kargoAPI, ns, "prod", person)
		return denied
	})
	t.Logf("Kargo's API server promoting for %s: %v", person, denied)
	for _, want := range []string{"Stage prod is paused by StagePause hold", "requested by " + person, "resume first", "promote with kubectl as someone who may update ProjectConfig " + ns} {
		if !strings.Contains(denied.Error(), want) {
			t.Errorf("denial %q does not say %q", denied, want)
		}
	}
	// Also with no create-actor at all: refused by this policy, or by the
	// shipped pause gate, which refuses every actor-less Promotion (the API
	// server names one of the two).
	_, err = driver.CreatePromotion(ctx, kargoAPI, ns, "prod", "")
	byAPIPolicy := deniedBy(err, apiPolicy) && strings.Contains(err.Error(), "requested by an unnamed user")
	if !byAPIPolicy && !deniedByAPauseGate(err) {
		t.Errorf("Kargo's API server promoting without a create-actor: %v, want refused", err)
	}
	// The way out the message names: kubectl as someone who may update the
	// ProjectConfig.
	waitFor(t, "lead's RoleBinding to let lead promote with kubectl while paused", func() bool {
		_, err := driver.CreatePromotion(ctx, env.lead, ns, "prod", "kubernetes:lead")
		if deniedBy(err, peoplePolicy) || deniedBy(err, apiPolicy) {
			t.Fatalf("lead promoting with kubectl while paused: %v, want allowed", err)
		}
		return err == nil
	})
	// PromotionRequests (what a target-aware Stage's promotion is) are
	// gated as Promotions are: a person without the right to update the
	// ProjectConfig is refused, one with it is not, and Kargo's API server
	// is refused whatever its rights.
	_, err = env.kube.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "promotionrequests-creator"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{kargoGroup}, Resources: []string{"promotionrequests"}, Verbs: []string{"create"}}},
	}, metav1.CreateOptions{})
	must(t, err)
	_, err = env.kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "promotionrequests-creators"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "promotionrequests-creator"},
		Subjects: []rbacv1.Subject{
			{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "dev"},
			{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: "lead"},
			{APIGroup: "rbac.authorization.k8s.io", Kind: "User", Name: kargoAPIUser},
		},
	}, metav1.CreateOptions{})
	must(t, err)
	waitDeniedBy(t, "the people gate to refuse dev's PromotionRequest", peoplePolicy, func() error {
		_, err := driver.CreatePromotionRequest(ctx, env.dev, ns, "prod")
		return err
	})
	waitDeniedBy(t, "the gate to refuse Kargo's API server's PromotionRequest", apiPolicy, func() error {
		_, err := driver.CreatePromotionRequest(ctx, kargoAPI, ns, "prod")
		return err
	})
	waitFor(t, "lead's PromotionRequest to be taken while paused", func() bool {
		_, err := driver.CreatePromotionRequest(ctx, env.lead, ns, "prod")
		if deniedBy(err, peoplePolicy) || deniedBy(err, apiPolicy) {
			t.Fatalf("lead creating a PromotionRequest with kubectl while paused: %v, want allowed", err)
		}
		return err == nil
	})
	// Only the paused Stage is closed.
	if _, err := driver.CreatePromotion(ctx, kargoAPI, ns, "dev", person); err != nil {
		t.Errorf("Kargo's API server promoting to the unpaused Stage dev: %v, want allowed", err)
	}
	must(t, deletePause(env.lead, ns, "hold"))
	waitFor(t, "the gate to let Kargo's API server promote after the resume", func() bool {
		_, err := driver.CreatePromotion(ctx, kargoAPI, ns, "prod", person)
		return err == nil
	})

	// Kargo's API server under another identity: the documented patch.
	other := "other-api-" + tag
	_, err = env.kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: other}}, metav1.CreateOptions{})
	must(t, err)
	otherUser := "system:serviceaccount:" + ns + ":" + other
	must(t, applyObjects([]*unstructured.Unstructured{
		cluster.BindUser("e2e-"+tag+"-other-promoter", "e2e-promoter", otherUser),
		cluster.BindUser("e2e-"+tag+"-other-projectconfigs", "e2e-projectconfig-editor", otherUser),
	}))
	t.Cleanup(func() {
		for _, name := range []string{"e2e-" + tag + "-other-promoter", "e2e-" + tag + "-other-projectconfigs"} {
			_ = env.kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), name, metav1.DeleteOptions{})
		}
	})
	otherCfg, err := env.cluster.ServiceAccountConfig(ctx, ns, other)
	must(t, err)
	otherAPI := dynamic.NewForConfigOrDie(otherCfg)

	tag2 := randomTag()
	prefix2 := "e2e-" + tag2 + "-"
	patched := buildOverlay(t, "namePrefix: "+prefix2+`
patches:
- target: {kind: ValidatingAdmissionPolicy, name: kargo-latch-pause-gate-kargo-api}
  patch: |-
    - op: replace
      path: /spec/matchConditions/0/expression
      value: request.userInfo.username == "`+otherUser+`"
`, "components/gate-people")
	isolatePolicies(t, tag2, patched)
	ns2 := env.newProject(t)
	isolateNamespace(t, ns2, tag2)
	env.createStage(t, ns2, "prod", nil)
	must(t, createPause(env.dev, pause(ns2, "hold", "prod", "Manual")))
	waitDeniedBy(t, "the patched gate to refuse the other API server identity", prefix2+"kargo-latch-pause-gate-kargo-api", func() error {
		_, err := driver.CreatePromotion(ctx, otherAPI, ns2, "prod", person)
		return err
	})
	if _, err := driver.CreatePromotion(ctx, kargoAPI, ns2, "prod", person); err != nil {
		t.Errorf("kargo-api where the gate names another identity: %v, want allowed (it may update the ProjectConfig)", err)
	}
}
