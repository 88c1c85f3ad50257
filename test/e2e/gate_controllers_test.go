package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/kargo-latch/kargo-latch/controller"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/cluster"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// Every Kargo controller is gated: the identities of Kargo's controllers
// are one setting (kargo-latch-kargo-controllers; the chart's
// pauseGate.kargoController* values), a list of usernames and/or a regex,
// and every policy that names Kargo's controllers takes them from it.

// widenedInstall builds manifests/default plus components, with the setting
// kargo-latch-kargo-controllers changed as manifests/base/kargo-controllers.yaml
// tells users to (a generator merging into it, and components/kargo-controllers
// listed last), under namePrefix prefix. It returns the admission policies
// and their bindings only.
func widenedInstall(t *testing.T, prefix, usernames, regex string, components ...string) []*unstructured.Unstructured {
	t.Helper()
	dir := t.TempDir()
	rel := func(path string) string {
		r, err := filepath.Rel(dir, filepath.Join(env.cluster.Root, "manifests", path))
		must(t, err)
		return jsonString(r)
	}
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamePrefix: " + prefix + "\n" +
		"resources: [" + rel("default") + "]\n" +
		"configMapGenerator:\n- name: kargo-latch-kargo-controllers\n  behavior: merge\n  literals:\n" +
		"  - " + jsonString("usernames="+usernames) + "\n  - " + jsonString("regex="+regex) + "\ncomponents:\n"
	for _, c := range append(components, "kargo-controllers") {
		k += "- " + rel(filepath.Join("components", c)) + "\n"
	}
	must(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o600))
	objs, err := cluster.Kustomize(dir)
	must(t, err)
	var policies []*unstructured.Unstructured
	for _, o := range objs {
		if _, ok := admissionPolicies[o.GetKind()]; ok {
			policies = append(policies, o)
		}
	}
	return policies
}

// TestGateRefusesEveryKargoController: an install whose setting names Kargo's
// controller ServiceAccount and, by a regex, the users of Kargo's shards.
// While a StagePause covers a Stage, its gate refuses the auto-promotions of
// both, Promotions and PromotionRequests (target-aware Stages) alike, with
// the pause's message; it lets a person's Promotion through, and both
// controllers' auto-promotions to an unpaused Stage, which it marks with
// nothing. Where the setting lacks the shard (the shipped default), the
// shard's auto-promotion passes, carries its username
// (kargo-latch.io/requested-by, stamped by the API server), and the
// operator's GateBypassed Warning names that username and the setting.
func TestGateRefusesEveryKargoController(t *testing.T) {
	t.Parallel()
	if !strings.Contains(env.cluster.CRDSource, "real") {
		t.Skip("needs Kargo's real CRDs (../shared/kargo-crds): PromotionRequest is not among the stand-ins")
	}
	tag := randomTag()
	prefix := "e2e-" + tag + "-"
	ns := env.newProject(t)
	// Kargo's controller ServiceAccount, as this install knows it: one of
	// its own (Kargo installed in the project's namespace), so that only
	// this test's gate can refuse it.
	kargoCtl := otherKargoController(t, ns)
	kargoCtlUser := "system:serviceaccount:" + ns + ":kargo-controller"
	isolatePolicies(t, tag, widenedInstall(t, prefix, kargoCtlUser, "^kargo-shard-(eu|us)$"))
	gate := prefix + "kargo-latch-pause-gate"
	isolateNamespace(t, ns, tag)
	env.createStage(t, ns, "prod", nil)
	env.createStage(t, ns, "dev", nil)
	must(t, createPause(env.dev, pause(ns, "hold", "prod", "Manual")))
	waitFor(t, "the widened gate to refuse the shard", func() bool {
		_, err := driver.CreatePromotion(ctx, env.kargoShard, ns, "prod", "")
		return deniedBy(err, gate)
	})

	for user, as := range map[string]dynamic.Interface{kargoCtlUser: kargoCtl, kargoShardUser: env.kargoShard} {
		_, err := driver.CreatePromotion(ctx, as, ns, "prod", "")
		if !deniedBy(err, gate) || !strings.Contains(err.Error(), "auto-promotion to Stage prod is paused by StagePause hold") {
			t.Errorf("%s auto-promoting to the paused Stage: %v, want refused by %s naming the pause", user, err, gate)
		}
		_, err = driver.CreatePromotionRequest(ctx, as, ns, "prod")
		if !deniedBy(err, gate) || !strings.Contains(err.Error(), "auto-promotion to Stage prod is paused by StagePause hold") {
			t.Errorf("%s auto-promoting to the paused target-aware Stage (a PromotionRequest): %v, want refused by %s", user, err, gate)
		}
		p, err := driver.CreatePromotion(ctx, as, ns, "dev", "")
		if err != nil {
			t.Errorf("%s auto-promoting to the unpaused Stage: %v", user, err)
		} else if by, ok := p.GetAnnotations()[controller.RequestedByAnnotation]; ok {
			t.Errorf("%s's auto-promotion to the unpaused Stage is marked requested-by %q; nothing is written while no pause covers a Stage", user, by)
		}
		if _, err := driver.CreatePromotionRequest(ctx, as, ns, "dev"); err != nil {
			t.Errorf("%s auto-promoting to the unpaused target-aware Stage (a PromotionRequest): %v", user, err)
		}
	}
	person, err := driver.CreatePromotion(ctx, env.dev, ns, "prod", "kubernetes:dev")
	if err != nil {
		t.Errorf("a person's Promotion to the paused Stage: %v, want allowed", err)
	} else if by, ok := person.GetAnnotations()[controller.RequestedByAnnotation]; ok {
		t.Errorf("a person's Promotion is marked requested-by %q; only auto-promotions are", by)
	}

	// Where the setting lacks the shard: the shipped install, whose setting
	// names Kargo's default controller only.
	other := env.newProject(t)
	op := startOperator(t, other, latch.Settings{LatchDeadline: time.Minute, DegradedGrace: time.Minute})
	prod := env.createStage(t, other, "prod", nil)
	pauseInForce(t, prod, "hold")
	if _, err := driver.CreatePromotionRequest(ctx, env.kargoCtl, other, "prod"); !apierrors.IsForbidden(err) {
		t.Errorf("Kargo's default controller creating a PromotionRequest for the paused Stage under the shipped gate: %v, want refused", err)
	}
	bypass, err := driver.CreatePromotion(ctx, env.kargoShard, other, "prod", "")
	if err != nil {
		t.Fatalf("the shard's auto-promotion where the setting lacks it: %v, want it to pass (the test needs it to)", err)
	}
	if by := bypass.GetAnnotations()[controller.RequestedByAnnotation]; by != kargoShardUser {
		t.Errorf("the bypassing Promotion is marked requested-by %q, want %s", by, kargoShardUser)
	}
	ev := waitEvent(t, prod, controller.ReasonGateBypassed)
	for _, want := range []string{bypass.GetName(), "by " + kargoShardUser + ",", "pauseGate.kargoControllers", "pauseGate.kargoControllerRegex", "kargo-latch-kargo-controllers"} {
		if !strings.Contains(ev.Message, want) {
			t.Errorf("GateBypassed %q does not say %q", ev.Message, want)
		}
	}
	waitFor(t, "the bypass to be counted", func() bool { return op.metric(gateMetric, "project", other, "stage", "prod") == 1 })
	// A PromotionRequest is marked too, though the operator does not judge
	// PromotionRequests (README, Limitations).
	pr, err := driver.CreatePromotionRequest(ctx, env.kargoShard, other, "prod")
	if err != nil {
		t.Fatalf("the shard's PromotionRequest where the setting lacks it: %v", err)
	}
	if by := pr.GetAnnotations()[controller.RequestedByAnnotation]; by != kargoShardUser {
		t.Errorf("the bypassing PromotionRequest is marked requested-by %q, want %s", by, kargoShardUser)
	}
}

// TestGatePeopleExemptsEveryKargoController: with the opt-in people gate and
// the setting widened to the shards' users, a Promotion from a shard's user
// that names a person as create-actor (no auto-promotion, so the pause gate
// lets it pass) is not held to the people's check either; a person who may
// not update the ProjectConfig is. Under the shipped setting, the people
// gate would refuse the shard as it refuses that person.
func TestGatePeopleExemptsEveryKargoController(t *testing.T) {
	t.Parallel()
	tag := randomTag()
	prefix := "e2e-" + tag + "-"
	isolatePolicies(t, tag, widenedInstall(t, prefix, "system:serviceaccount:kargo:kargo-controller", "^kargo-shard-(eu|us)$", "gate-people"))
	people := prefix + "kargo-latch-pause-gate-people"
	ns := env.newProject(t)
	isolateNamespace(t, ns, tag)
	env.createStage(t, ns, "prod", nil)
	must(t, createPause(env.dev, pause(ns, "hold", "prod", "Manual")))
	waitFor(t, "the people gate to refuse dev", func() bool {
		_, err := driver.CreatePromotion(ctx, env.dev, ns, "prod", "kubernetes:dev")
		return deniedBy(err, people)
	})
	if _, err := driver.CreatePromotion(ctx, env.kargoShard, ns, "prod", "kubernetes:dev"); err != nil {
		t.Errorf("the shard's Promotion naming a person, to the paused Stage: %v, want allowed (Kargo's controllers are exempt from the people's check)", err)
	}
	if _, err := driver.CreatePromotion(ctx, env.kargoShard, ns, "prod", ""); !apierrors.IsForbidden(err) {
		t.Errorf("the shard's auto-promotion to the paused Stage: %v, want refused", err)
	}
}

// TestKargoControllersSettingReachesEveryPolicy: changing the one setting
// (kustomize: the documented generator and component; Helm: the values)
// changes every policy that names Kargo's controllers, the opt-in ones
// included: no object still names Kargo's default controller, the pause
// gate and the people gate name the new usernames and regex, and the chart
// renders the same objects as kustomize.
func TestKargoControllersSettingReachesEveryPolicy(t *testing.T) {
	t.Parallel()
	const usernames, regex = "sentinel-one,sentinel-two", "^sentinel-(eu|us)$"
	built := widenedInstall(t, "", usernames, regex, "gate-people")
	rendered := renderChart(t, "kargo-latch", "kargo-latch", "--api-versions", mutatingPolicyAPI,
		"--set", "pauseGate.people.enabled=true", "--set", "pauseGate.kargoControllerServiceAccount.name=",
		"--set", "pauseGate.kargoControllers={sentinel-one,sentinel-two}", "--set", "pauseGate.kargoControllerRegex="+regex)
	for name, objs := range map[string][]*unstructured.Unstructured{"kustomize": built, "helm": rendered} {
		named := map[string]bool{}
		for _, o := range objs {
			b, err := o.MarshalJSON()
			must(t, err)
			if strings.Contains(string(b), "kargo:kargo-controller") {
				t.Errorf("%s: %s %s still names Kargo's default controller: %s", name, o.GetKind(), o.GetName(), b)
			}
			if strings.Contains(string(b), "r'"+usernames+"'") && strings.Contains(string(b), "r'"+regex+"'") {
				named[o.GetKind()+"/"+o.GetName()] = true
			}
		}
		for _, want := range []string{"ValidatingAdmissionPolicy/kargo-latch-pause-gate", "ValidatingAdmissionPolicy/kargo-latch-pause-gate-people"} {
			if !named[want] {
				t.Errorf("%s: %s does not name the new usernames and regex (those that do: %v)", name, want, named)
			}
		}
	}
	var policies []*unstructured.Unstructured
	for _, o := range rendered {
		if _, ok := admissionPolicies[o.GetKind()]; ok {
			policies = append(policies, o)
		}
	}
	compareInstalls(t, policies, built)
}

// TestRequestedByBindingFollowsNamePrefix: kustomize knows that a
// ValidatingAdmissionPolicyBinding names its policy, not that a
// MutatingAdmissionPolicyBinding does; components/requested-by teaches it,
// so that an overlay's namePrefix keeps the binding on its policy.
func TestRequestedByBindingFollowsNamePrefix(t *testing.T) {
	t.Parallel()
	objs := widenedInstall(t, "renamed-", "system:serviceaccount:kargo:kargo-controller", "")
	found := false
	for _, o := range objs {
		if o.GetKind() == "MutatingAdmissionPolicyBinding" {
			found = true
			if policy, _, _ := unstructured.NestedString(o.Object, "spec", "policyName"); policy != "renamed-kargo-latch-requested-by" || o.GetName() != policy {
				t.Errorf("MutatingAdmissionPolicyBinding %s binds %q, want renamed-kargo-latch-requested-by", o.GetName(), policy)
			}
		}
	}
	if !found {
		t.Error("the build has no MutatingAdmissionPolicyBinding")
	}
}

// dropRequestedBy writes an overlay of base that drops the requested-by
// mark with the patches components/requested-by/kustomization.yaml shows,
// copied from there, and returns its directory.
func dropRequestedBy(t *testing.T, base string) string {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(env.cluster.Root, "manifests", "components", "requested-by", "kustomization.yaml"))
	must(t, err)
	var patches []string
	in := false
	for _, line := range strings.Split(string(doc), "\n") {
		switch {
		case strings.HasPrefix(line, "#   patches:"):
			in = true
		case in && strings.HasPrefix(line, "#   "):
			patches = append(patches, strings.TrimPrefix(line, "#   "))
		default:
			in = false
		}
	}
	if len(patches) == 0 {
		t.Fatal("components/requested-by/kustomization.yaml shows no patches to drop it")
	}
	dir := t.TempDir()
	b, err := filepath.Rel(dir, base)
	must(t, err)
	k := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [" + jsonString(b) + "]\npatches:\n" + strings.Join(patches, "\n") + "\n"
	//nolint:gosec // the repository's own documentation, into the test's temporary directory
	must(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o600))
	return dir
}

// mutatingPolicyAPI is what `helm template` needs to be told the cluster
// serves for the chart to render the requested-by mark.
const mutatingPolicyAPI = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"
