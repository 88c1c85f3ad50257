package e2e

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
)

// TestResumePolicyExemptsOnlyKubernetesControllers: with the opt-in
// resume-requires-projectconfig-update component, a kube-system
// ServiceAccount that is neither the garbage collector nor the namespace
// controller, holding the resumer's rights, cannot resume without the
// ProjectConfig right; the garbage collector (the real one, in
// kube-controller-manager) still deletes a pause with its Stage.
func TestResumePolicyExemptsOnlyKubernetesControllers(t *testing.T) {
	t.Parallel()
	tag := randomTag()
	prefix := "e2e-" + tag + "-"
	objs := buildOverlay(t, "namePrefix: "+prefix+"\n", "components/resume-requires-projectconfig-update")
	isolatePolicies(t, tag, objs)
	policy := prefix + "kargo-latch-resume-requires-projectconfig-update"
	ns := env.newProject(t)
	isolateNamespace(t, ns, tag)

	// An intruder in kube-system with the resumer's rights (a ClusterRoleBinding).
	intruder := prefix + "intruder"
	_, err := env.kube.CoreV1().ServiceAccounts("kube-system").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: intruder}}, metav1.CreateOptions{})
	must(t, err)
	binding := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
		"metadata": map[string]any{"name": intruder},
		"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kargo-latch-resumer"},
		"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": intruder, "namespace": "kube-system"}},
	}}
	must(t, applyObjects([]*unstructured.Unstructured{binding}))
	t.Cleanup(func() {
		bg := context.Background()
		_ = env.kube.RbacV1().ClusterRoleBindings().Delete(bg, intruder, metav1.DeleteOptions{})
		_ = env.kube.CoreV1().ServiceAccounts("kube-system").Delete(bg, intruder, metav1.DeleteOptions{})
	})
	cfg, err := env.cluster.ServiceAccountConfig(ctx, "kube-system", intruder)
	must(t, err)
	asIntruder := dynamic.NewForConfigOrDie(cfg)

	stage := env.createStage(t, ns, "prod", nil)
	must(t, createPause(env.dev, pause(ns, "hold", "prod", "Manual")))
	// The policy is live here once a resumer without the ProjectConfig
	// right is refused by it.
	// (Dry runs, so that a try made before the policy is live deletes
	// nothing; admission runs all the same.)
	waitDeniedBy(t, "the resume policy to refuse the resumer", policy, func() error {
		return dryRunDeletePause(env.resumer, ns, "hold")
	})
	var denied error
	// Until its RoleBinding applies, RBAC refuses it (Forbidden, not by
	// the policy): wait for the policy's answer, or a wrongful success.
	waitFor(t, "the intruder's request to reach the resume policy", func() bool {
		denied = dryRunDeletePause(asIntruder, ns, "hold")
		return denied == nil || deniedBy(denied, policy) || !apierrors.IsForbidden(denied)
	})
	if !deniedBy(denied, policy) {
		t.Errorf("a kube-system ServiceAccount other than the garbage collector and namespace controller resuming: %v, want refused by %s", denied, policy)
	}
	if len(env.listPauses(t, ns)) != 1 {
		t.Fatal("the pause is gone")
	}
	must(t, deletePause(env.lead, ns, "hold"))

	// The garbage collector is exempt: a pause owned by its Stage goes with it.
	u, err := stage.Get(ctx)
	must(t, err)
	owned := pause(ns, "owned", "prod", "PromotionFailed")
	owned.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: kargo.GroupVersion.String(), Kind: "Stage", Name: "prod", UID: u.GetUID()}})
	must(t, createPause(env.dyn, owned))
	must(t, env.dyn.Resource(kargo.StagesResource).Namespace(ns).Delete(ctx, "prod", metav1.DeleteOptions{}))
	waitFor(t, "the garbage collector to delete the pause its Stage owned", func() bool {
		return len(env.listPauses(t, ns)) == 0
	})
}

func dryRunDeletePause(client dynamic.Interface, ns, name string) error {
	return client.Resource(v1alpha1.StagePausesResource).Namespace(ns).Delete(context.Background(), name, metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
}
