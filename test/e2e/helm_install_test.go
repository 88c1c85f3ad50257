package e2e

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/cluster"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// TestHelmInstallPausesAStage installs kargo-latch from the chart, with
// pause-on-failure on by default, into a namespace of its own, then runs
// the binary of the image the Deployment names (`make image`'s), with the
// arguments and environment of the Deployment the chart made, as the
// ServiceAccount the chart made (no kubelet runs Pods here). A failed
// promotion pauses its Stage, and the chart's pause gate, keyed on the
// Kargo controller ServiceAccount given in the values (the value of before
// pauseGate.kargoControllers, which keeps working) and on the regex of
// pauseGate.kargoControllerRegex, refuses the auto-promotions of Kargo's
// controller and of a shard's to it. The install has no requester mark,
// which is opt-in, although the cluster serves MutatingAdmissionPolicy.
func TestHelmInstallPausesAStage(t *testing.T) {
	t.Parallel()
	releaseNS := env.newProject(t)
	project := env.newProject(t)
	// The release name holds the chart's, so it is every object's prefix.
	release := "kargo-latch-e2e-" + randomTag()

	// Kargo's controller, as this install's gate knows it: a ServiceAccount
	// of its own, so that only this install's gate can refuse it.
	_, err := env.kube.CoreV1().ServiceAccounts(releaseNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "kargo-controller"}}, metav1.CreateOptions{})
	must(t, err)
	kargoControllerUser := "system:serviceaccount:" + releaseNS + ":kargo-controller"
	must(t, applyObjects([]*unstructured.Unstructured{cluster.BindUser(release+"-kargo-controller", "e2e-kargo-controller", kargoControllerUser)}))
	t.Cleanup(func() {
		_ = env.kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), release+"-kargo-controller", metav1.DeleteOptions{})
	})
	// A shard's controller, matched by this install's regex only.
	_, err = env.kube.CoreV1().ServiceAccounts(releaseNS).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "kargo-shard-eu"}}, metav1.CreateOptions{})
	must(t, err)
	must(t, applyObjects([]*unstructured.Unstructured{cluster.BindUser(release+"-kargo-shard", "e2e-kargo-controller", "system:serviceaccount:"+releaseNS+":kargo-shard-eu")}))
	t.Cleanup(func() {
		_ = env.kube.RbacV1().ClusterRoleBindings().Delete(context.Background(), release+"-kargo-shard", metav1.DeleteOptions{})
	})

	settings := []string{
		"controller.namespaces={" + project + "}",
		"controller.workers=2",
		"controller.kubeApiQPS=100",
		"controller.kubeApiBurst=200",
		"controller.logLevel=2",
		"controller.newFailureWindow=5m",
		"controller.stageDefaults.pauseOnFailure=true",
		"controller.stageDefaults.latchDeadline=1m",
		"controller.stageDefaults.degradedGrace=1m",
		"controller.stageDefaults.drainOnPause=false",
		"controller.stageDefaults.markVerified=true",
		"markVerified.installRights=true",
		"pauseGate.kargoControllerServiceAccount.namespace=" + releaseNS,
		"pauseGate.kargoControllerRegex=^system:serviceaccount:" + releaseNS + ":kargo-shard-[a-z]+$",
	}
	args := []string{"install", release, filepath.Join(env.cluster.Root, chartPath), "--namespace", releaseNS,
		// The shared test cluster has the CRD already, from the kustomize
		// install, and Helm adopts no object it did not make.
		"--set", "crds.install=false"}
	args = append(args, setFlags(settings)...)
	kubeconfig := writeKubeconfig(t, env.cluster.Config)
	home := t.TempDir()
	runHelm(t, home, append(args, "--kubeconfig", kubeconfig)...)
	t.Cleanup(func() {
		if out, err := helmCommand(home, "uninstall", release, "--namespace", releaseNS, "--kubeconfig", kubeconfig).CombinedOutput(); err != nil {
			t.Errorf("helm uninstall: %v\n%s", err, out)
		}
	})

	narrowReleasePolicies(t, release, project, releaseNS)

	deployment, err := env.kube.AppsV1().Deployments(releaseNS).Get(ctx, release, metav1.GetOptions{})
	must(t, err)
	deployed := deployment.Spec.Template.Spec.Containers[0].Args
	for _, want := range []string{
		"--leader-elect", "--namespace=" + project, "--workers=2", "--kube-api-qps=100", "--kube-api-burst=200", "--v=2",
		"--new-failure-window=5m", "--pause-on-failure=true", "--latch-deadline=1m", "--degraded-grace=1m",
		"--drain-on-pause=false", "--mark-verified=true",
	} {
		if !slices.Contains(deployed, want) {
			t.Errorf("the Deployment's args %v lack %s", deployed, want)
		}
	}

	identity, err := env.cluster.ServiceAccountConfig(ctx, releaseNS, release)
	must(t, err)
	// Outside a Pod: the Lease's namespace is given, and the ports are
	// left to the tests that own them.
	p := newProcessAs(t, identity, append(slices.Clone(deployed),
		"--leader-election-namespace="+releaseNS, "--metrics-bind-address=0", "--health-probe-bind-address=0")...)
	runFromImage(t, p, deployment.Namespace, deployment.Spec.Template.Spec.Containers[0])
	p.start()

	prod := env.createStage(t, project, "prod", nil)
	promoteAndLatch(t, prod)
	kargoController, err := env.cluster.ServiceAccountConfig(ctx, releaseNS, "kargo-controller")
	must(t, err)
	asKargo := dynamic.NewForConfigOrDie(kargoController)
	if _, err := driver.CreatePromotion(ctx, asKargo, project, "prod", ""); err != nil {
		t.Fatalf("Kargo's auto-promotion to the Stage before any failure: %v", err)
	}

	_, err = prod.FinishPromotion(ctx, "Failed")
	must(t, err)
	waitPaused(t, prod, true)
	pauses := env.listPauses(t, project)
	if len(pauses) != 1 {
		t.Fatalf("%d StagePauses after one failure, want 1", len(pauses))
	}
	if reason, _, _ := unstructured.NestedString(pauses[0].Object, "spec", "reason"); reason != string(latch.ReasonPromotionFailed) {
		t.Errorf("pause reason %q, want %s", reason, latch.ReasonPromotionFailed)
	}
	gate := release + "-pause-gate"
	var refused error
	// The shipped gate of the tests' default install refuses an actor-less
	// Promotion by its shape too, and admission names either: either
	// refusal will do here.
	waitFor(t, "the pause gates to refuse Kargo's auto-promotion", func() bool {
		_, refused = driver.CreatePromotion(ctx, asKargo, project, "prod", "")
		return apierrors.IsForbidden(refused) && strings.Contains(refused.Error(), "paused by StagePause")
	})
	if !strings.Contains(refused.Error(), pauses[0].GetName()) {
		t.Errorf("the gate's denial %q does not name the pause %s", refused, pauses[0].GetName())
	}
	// A refusal that names the chart's gate shows it loaded.
	waitDeniedBy(t, "the chart's gate to refuse Kargo's auto-promotion", gate, func() error {
		_, err := driver.CreatePromotion(ctx, dryRunAs(kargoController), project, "prod", "")
		return err
	})
	// The chart's gate alone names the chart's Kargo controller and the
	// shard its regex matches: given the right to update the ProjectConfig,
	// which passes the shipped gate, their PromotionRequests are refused by
	// the chart's gate, which shows both values in force.
	shardUser := "system:serviceaccount:" + releaseNS + ":kargo-shard-eu"
	var rights []*unstructured.Unstructured
	for name, user := range map[string]string{"controller": kargoControllerUser, "shard": shardUser} {
		binding := cluster.BindUser("e2e-"+project+"-"+name+"-projectconfigs", "e2e-projectconfig-editor", user)
		binding.SetKind("RoleBinding")
		binding.SetNamespace(project)
		rights = append(rights, binding)
	}
	must(t, applyObjects(rights))
	shard, err := env.cluster.ServiceAccountConfig(ctx, releaseNS, "kargo-shard-eu")
	must(t, err)
	for user, cfg := range map[string]*rest.Config{kargoControllerUser: kargoController, shardUser: shard} {
		waitMayUpdateProjectConfig(t, user, project)
		if _, err := driver.CreatePromotionRequest(ctx, dryRunAs(cfg), project, "prod"); !deniedBy(err, gate) {
			t.Errorf("%s's PromotionRequest for the paused Stage, with the right to update the ProjectConfig: %v, want refused by %s", user, err, gate)
		}
	}
	// Refused by its shape, by either gate.
	if _, err := driver.CreatePromotion(ctx, dynamic.NewForConfigOrDie(shard), project, "prod", ""); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "paused by StagePause") {
		t.Errorf("the shard's auto-promotion to the paused Stage: %v, want refused naming the pause", err)
	}
	// The requester mark is opt-in: a cluster-wide mutating policy would
	// refuse Promotions with 503 for a moment after the API server starts.
	if _, err := env.dyn.Resource(admissionPolicies["MutatingAdmissionPolicy"]).Get(ctx, release+"-requested-by", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the chart's defaults installed the requester mark (%v), want it opt-in", err)
	}
	if p.exited() {
		t.Error("the operator exited")
	}
}

// narrowReleasePolicies binds the admission policies of a Helm release to
// the namespaces given. The chart binds them to every namespace, as a user
// wants; here the tests that run beside this one would meet them too, and
// where several policies refuse a request, the API server names one of them
// in no fixed order, so a check that expects the shipped gate's name would
// meet this release's. Until the API server has loaded the patch (within a
// second or so), deniedByAPauseGate accepts either.
func narrowReleasePolicies(t *testing.T, release string, namespaces ...string) {
	t.Helper()
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"matchResources": map[string]any{"namespaceSelector": map[string]any{
		"matchExpressions": []any{map[string]any{"key": corev1.LabelMetadataName, "operator": "In", "values": namespaces}},
	}}}})
	must(t, err)
	var narrowed []string
	for _, kind := range []string{"ValidatingAdmissionPolicyBinding", "MutatingAdmissionPolicyBinding"} {
		bindings, err := env.dyn.Resource(admissionPolicies[kind]).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + release})
		must(t, err)
		for _, b := range bindings.Items {
			// A merge patch would replace a selector of the chart's own.
			if _, found, _ := unstructured.NestedMap(b.Object, "spec", "matchResources"); found {
				t.Fatalf("%s %s has matchResources of its own, which narrowing would change", kind, b.GetName())
			}
			_, err := env.dyn.Resource(admissionPolicies[kind]).Patch(ctx, b.GetName(), types.MergePatchType, patch, metav1.PatchOptions{})
			must(t, err)
			narrowed = append(narrowed, b.GetName())
		}
	}
	if !slices.Contains(narrowed, release+"-pause-gate") {
		t.Fatalf("narrowed the bindings %v of the release %s, which lack its pause gate's", narrowed, release)
	}
}
