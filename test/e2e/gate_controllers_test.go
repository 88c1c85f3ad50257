package e2e

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/kargo-latch/kargo-latch/api"
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
	var policies []*unstructured.Unstructured
	for _, o := range widenedBuild(t, prefix, usernames, regex, components...) {
		if _, ok := admissionPolicies[o.GetKind()]; ok {
			policies = append(policies, o)
		}
	}
	return policies
}

// widenedBuild is widenedInstall's every object.
func widenedBuild(t *testing.T, prefix, usernames, regex string, components ...string) []*unstructured.Unstructured {
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
	// "!kargo-controllers" leaves the component out, as a mistaken overlay.
	if !slices.Contains(components, "!kargo-controllers") {
		components = append(components, "kargo-controllers")
	}
	for _, c := range components {
		if !strings.HasPrefix(c, "!") {
			k += "- " + rel(filepath.Join("components", c)) + "\n"
		}
	}
	must(t, os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o600))
	objs, err := cluster.Kustomize(dir)
	must(t, err)
	return objs
}

// TestGateRefusesEveryKargoController: an install whose setting names Kargo's
// controller ServiceAccount and, by a regex, the users of Kargo's shards.
// While a StagePause covers a Stage, its gate refuses the auto-promotions of
// both, Promotions and PromotionRequests (target-aware Stages) alike, with
// the pause's message; it lets a person's Promotion through, and both
// controllers' auto-promotions to an unpaused Stage. Where the setting lacks
// the shard (the shipped default), the shard's auto-promotion passes; with
// the opt-in requester mark, it carries the shard's username
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
	isolatePolicies(t, tag, widenedInstall(t, prefix, kargoCtlUser, "kargo-shard-(eu|us)"))
	gate := prefix + "kargo-latch-pause-gate"
	isolateNamespace(t, ns, tag)
	env.createStage(t, ns, "prod", nil)
	env.createStage(t, ns, "dev", nil)
	must(t, createPause(env.dev, pause(ns, "hold", "prod", "Manual")))
	// The shipped gate refuses every actor-less Promotion too (by shape),
	// and the PromotionRequests of anyone who may not update the
	// ProjectConfig: only a PromotionRequest of a controller this install
	// names and the shipped one does not, which may update it (the shard,
	// given the right here), shows this install's gate in force.
	shardRights := cluster.BindUser("e2e-"+tag+"-shard-projectconfigs", "e2e-projectconfig-editor", kargoShardUser)
	shardRights.SetKind("RoleBinding")
	shardRights.SetNamespace(ns)
	must(t, applyObjects([]*unstructured.Unstructured{shardRights}))
	shardRequests := dryRunAs(env.cluster.UserConfig(kargoShardToken))
	waitDeniedBy(t, "this install's gate to refuse the shard's PromotionRequest", gate, func() error {
		_, err := driver.CreatePromotionRequest(ctx, shardRequests, ns, "prod")
		return err
	})

	for user, as := range map[string]dynamic.Interface{kargoCtlUser: kargoCtl, kargoShardUser: env.kargoShard} {
		_, err := driver.CreatePromotion(ctx, as, ns, "prod", "")
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "auto-promotion to Stage prod is paused by StagePause hold") {
			t.Errorf("%s auto-promoting to the paused Stage: %v, want refused naming the pause", user, err)
		}
		_, err = driver.CreatePromotionRequest(ctx, as, ns, "prod")
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "auto-promotion to Stage prod is paused by StagePause hold") {
			t.Errorf("%s auto-promoting to the paused target-aware Stage (a PromotionRequest): %v, want refused naming the pause", user, err)
		}
		if _, err := driver.CreatePromotion(ctx, as, ns, "dev", ""); err != nil {
			t.Errorf("%s auto-promoting to the unpaused Stage: %v", user, err)
		}
		if _, err := driver.CreatePromotionRequest(ctx, as, ns, "dev"); err != nil {
			t.Errorf("%s auto-promoting to the unpaused target-aware Stage (a PromotionRequest): %v", user, err)
		}
	}
	if _, err := driver.CreatePromotion(ctx, env.dev, ns, "prod", "kubernetes:dev"); err != nil {
		t.Errorf("a person's Promotion to the paused Stage: %v, want allowed", err)
	}

	// Where the setting lacks the shard: the shipped install, whose setting
	// names Kargo's default controller only, with the requester mark. The
	// shard's actor-less Promotion is refused all the same (issue 24: by
	// shape, whoever creates it); a person's passes. A PromotionRequest
	// carries no actor, so the gate fails closed: the shard's is refused
	// too (it may not update the ProjectConfig), and so is a person's who
	// may not (dev); Kargo's API server's passes (it may: the UI's way to
	// promote while paused). A Promotion the shard creates with a kubernetes: actor
	// (Kargo's webhook took it for a person: Kargo's own regex lacks it)
	// passes the gate as a person's, and GateBypassed names the shard and
	// Kargo's setting to widen.
	other := env.newProject(t)
	installRequestedBy(t, other)
	op := startOperator(t, other, latch.Settings{LatchDeadline: time.Minute, DegradedGrace: time.Minute})
	prod := env.createStage(t, other, "prod", nil)
	pauseInForce(t, prod, "hold")
	waitMarked(t, other)
	if _, err := driver.CreatePromotionRequest(ctx, env.kargoCtl, other, "prod"); !apierrors.IsForbidden(err) {
		t.Errorf("Kargo's default controller creating a PromotionRequest for the paused Stage under the shipped gate: %v, want refused", err)
	}
	if _, err := driver.CreatePromotion(ctx, env.kargoShard, other, "prod", ""); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "paused by StagePause hold") {
		t.Errorf("the shard's actor-less Promotion where the setting lacks it: %v, want refused by the shipped gate", err)
	}
	if _, err := driver.CreatePromotion(ctx, env.kargoShard, other, "prod", "controller:kargo-shard"); !apierrors.IsForbidden(err) {
		t.Errorf("the shard's controller: Promotion where the setting lacks it: %v, want refused by the shipped gate", err)
	}
	if _, err := driver.CreatePromotion(ctx, env.dev, other, "prod", "kubernetes:dev"); err != nil {
		t.Errorf("a person's Promotion to the paused Stage under the shipped gate: %v, want allowed", err)
	}
	if _, err := driver.CreatePromotionRequest(ctx, env.kargoShard, other, "prod"); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "paused by StagePause hold") {
		t.Errorf("the shard's PromotionRequest where the setting lacks it: %v, want refused by the shipped gate (it fails closed)", err)
	}
	if _, err := driver.CreatePromotionRequest(ctx, env.dev, other, "prod"); !apierrors.IsForbidden(err) {
		t.Errorf("a PromotionRequest of dev, who may not update the ProjectConfig, for the paused Stage: %v, want refused", err)
	}
	if _, err := driver.CreatePromotionRequest(ctx, dynamic.NewForConfigOrDie(env.cluster.UserConfig(kargoAPIToken)), other, "prod"); err != nil {
		t.Errorf("Kargo's API server's PromotionRequest for the paused Stage: %v, want allowed (it may update the ProjectConfig)", err)
	}
	bypass, err := driver.CreatePromotion(ctx, env.kargoShard, other, "prod", "kubernetes:"+kargoShardUser)
	if err != nil {
		t.Fatalf("the shard's Promotion stamped as a person's: %v, want it to pass (the test needs it to)", err)
	}
	ev := waitEvent(t, prod, api.ReasonGateBypassed)
	for _, want := range []string{bypass.GetName(), "by Kargo controller " + kargoShardUser + ",", "webhooksServer.controlplaneUserRegex"} {
		if !strings.Contains(ev.Message, want) {
			t.Errorf("GateBypassed %q does not say %q", ev.Message, want)
		}
	}
	waitFor(t, "the bypass to be counted", func() bool { return op.metric(gateMetric, "project", other, "stage", "prod") == 1 })
}

// TestGatePeopleExemptsOnlyKargoAutoPromotions: with the opt-in people gate
// and the setting widened to the shards' users, the people gate leaves the
// shard's auto-promotion to the pause gate; but a Promotion from the shard's
// user that names a person as create-actor (no auto-promotion, so the pause
// gate lets it pass) is held to the people's check as the person's is:
// neither may update the ProjectConfig. This install's own pause gate is
// left out, so that the people gate is the only policy here that could
// refuse the shard (the shipped gate does not name it).
func TestGatePeopleExemptsOnlyKargoAutoPromotions(t *testing.T) {
	t.Parallel()
	if !strings.Contains(env.cluster.CRDSource, "real") {
		t.Skip("needs Kargo's real CRDs (../shared/kargo-crds): PromotionRequest is not among the stand-ins")
	}
	tag := randomTag()
	prefix := "e2e-" + tag + "-"
	var policies []*unstructured.Unstructured
	for _, o := range widenedInstall(t, prefix, "system:serviceaccount:kargo:kargo-controller", "kargo-shard-(eu|us)", "gate-people") {
		if !strings.HasSuffix(o.GetName(), "kargo-latch-pause-gate") {
			policies = append(policies, o)
		}
	}
	isolatePolicies(t, tag, policies)
	people := prefix + "kargo-latch-pause-gate-people"
	ns := env.newProject(t)
	isolateNamespace(t, ns, tag)
	env.createStage(t, ns, "prod", nil)
	must(t, createPause(env.dev, pause(ns, "hold", "prod", "Manual")))
	waitDeniedBy(t, "the people gate to refuse dev", people, func() error {
		_, err := driver.CreatePromotion(ctx, dryRunAs(env.cluster.UserConfig(devToken)), ns, "prod", "kubernetes:dev")
		return err
	})
	if _, err := driver.CreatePromotion(ctx, env.kargoShard, ns, "prod", "kubernetes:dev"); !deniedBy(err, people) {
		t.Errorf("the shard's Promotion naming a person, to the paused Stage: %v, want refused by %s (only auto-promotions are exempt)", err, people)
	}
	// A PromotionRequest: the people gate leaves the shard's to the pause
	// gate, here the shipped one, which fails closed for PromotionRequests
	// (the shard may not update the ProjectConfig).
	if _, err := driver.CreatePromotionRequest(ctx, env.kargoShard, ns, "prod"); deniedBy(err, people) || !deniedByAPauseGate(err) {
		t.Errorf("the shard's PromotionRequest for the paused Stage, with no pause gate of this install: %v, want the people gate to leave it to the shipped pause gate, which refuses it", err)
	}
}

// TestKargoControllersRegexIsMatchedWhole: the setting's regex must match a
// username whole. With the regex kargo-shard (which Kargo's unanchored
// controlplaneUserRegex would take to match kargo-shard-eu), the user
// kargo-shard-eu is none of Kargo's controllers. A PromotionRequest, which
// carries no actor, is refused from Kargo's controllers and from anyone who
// may not update the ProjectConfig: once kargo-shard-eu may, its
// PromotionRequest passes both gates, which it would not as a controller.
// The setting's username is a Kargo controller of the project's namespace:
// given the same right, its PromotionRequest is refused by this install's
// gate alone (the shipped one does not name it), which shows that gate in
// force.
func TestKargoControllersRegexIsMatchedWhole(t *testing.T) {
	t.Parallel()
	if !strings.Contains(env.cluster.CRDSource, "real") {
		t.Skip("needs Kargo's real CRDs (../shared/kargo-crds): PromotionRequest is not among the stand-ins")
	}
	tag := randomTag()
	prefix := "e2e-" + tag + "-"
	ns := env.newProject(t)
	otherKargoController(t, ns)
	isolatePolicies(t, tag, widenedInstall(t, prefix, "system:serviceaccount:"+ns+":kargo-controller", "kargo-shard", "gate-people"))
	gate, people := prefix+"kargo-latch-pause-gate", prefix+"kargo-latch-pause-gate-people"
	isolateNamespace(t, ns, tag)
	env.createStage(t, ns, "prod", nil)
	must(t, createPause(env.dev, pause(ns, "hold", "prod", "Manual")))
	kargoCtl, err := env.cluster.ServiceAccountConfig(ctx, ns, "kargo-controller")
	must(t, err)
	// The shipped gate refuses an actor-less Promotion by its shape too; a
	// refusal that names this install's gate shows it loaded.
	waitDeniedBy(t, "this install's gate to refuse an auto-promotion to the paused Stage", gate, func() error {
		_, err := driver.CreatePromotion(ctx, dryRunAs(kargoCtl), ns, "prod", "")
		return err
	})
	waitDeniedBy(t, "the people gate to refuse dev", people, func() error {
		_, err := driver.CreatePromotion(ctx, dryRunAs(env.cluster.UserConfig(devToken)), ns, "prod", "kubernetes:dev")
		return err
	})
	// A PromotionRequest: a Promotion's shape alone would have the gate
	// refuse it whoever made it. Without the right to update the
	// ProjectConfig, the shard is refused (the gates fail closed); with
	// it, it passes: it is no Kargo controller.
	if _, err := driver.CreatePromotionRequest(ctx, env.kargoShard, ns, "prod"); !apierrors.IsForbidden(err) {
		t.Errorf("%s's PromotionRequest for the paused Stage, without the right to update the ProjectConfig: %v, want refused", kargoShardUser, err)
	}
	binding := cluster.BindUser("e2e-"+tag+"-shard-projectconfigs", "e2e-projectconfig-editor", kargoShardUser)
	binding.SetKind("RoleBinding")
	binding.SetNamespace(ns)
	controllerBinding := cluster.BindUser("e2e-"+tag+"-controller-projectconfigs", "e2e-projectconfig-editor", "system:serviceaccount:"+ns+":kargo-controller")
	controllerBinding.SetKind("RoleBinding")
	controllerBinding.SetNamespace(ns)
	must(t, applyObjects([]*unstructured.Unstructured{binding, controllerBinding}))
	waitMayUpdateProjectConfig(t, kargoShardUser, ns)
	waitMayUpdateProjectConfig(t, "system:serviceaccount:"+ns+":kargo-controller", ns)
	// The listed controller is refused whatever its rights, by this
	// install's gate alone (loaded, as shown above; the shipped gate lets
	// one who may update the ProjectConfig pass).
	if _, err := driver.CreatePromotionRequest(ctx, dryRunAs(kargoCtl), ns, "prod"); !deniedBy(err, gate) {
		t.Errorf("its listed controller's PromotionRequest, which may update the ProjectConfig: %v, want refused by %s", err, gate)
	}
	waitFor(t, kargoShardUser+"'s PromotionRequest to pass once it may update the ProjectConfig", func() bool {
		_, err := driver.CreatePromotionRequest(ctx, env.kargoShard, ns, "prod")
		if deniedBy(err, gate) && !strings.Contains(err.Error(), "paused by StagePause") {
			t.Fatalf("refused by %s for another reason: %v", gate, err)
		}
		return err == nil
	})
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
			if strings.Contains(string(b), "r'''"+usernames+"'''") && strings.Contains(string(b), "r'''"+regex+"'''") &&
				strings.Contains(string(b), "r'''^(?:(?:)"+regex+"(?:))$'''") {
				named[o.GetKind()+"/"+o.GetName()] = true
			}
		}
		for _, want := range []string{"ValidatingAdmissionPolicy/kargo-latch-pause-gate", "ValidatingAdmissionPolicy/kargo-latch-pause-gate-people"} {
			if !named[want] {
				t.Errorf("%s: %s does not name the new usernames and regex (those that do: %v)", name, want, named)
			}
		}
	}
	// The operator is given the same setting, to compare with the
	// policies at start and to advise by.
	checkOperatorSetting(t, "kustomize", widenedBuild(t, "", usernames, regex, "gate-people"), strings.Split(usernames, ","), regex)
	checkOperatorSetting(t, "helm", rendered, strings.Split(usernames, ","), regex)
	// An overlay that changes the setting but forgets the component: the
	// policies keep the default, the operator reads the overlay's values,
	// so its check at start finds them different and warns.
	forgotten := widenedBuild(t, "", usernames, regex, "gate-people", "!kargo-controllers")
	checkOperatorSetting(t, "kustomize without components/kargo-controllers", forgotten, strings.Split(usernames, ","), regex)
	for _, o := range forgotten {
		if b, err := o.MarshalJSON(); err == nil && o.GetKind() == "ValidatingAdmissionPolicy" && strings.Contains(string(b), usernames) {
			t.Errorf("without components/kargo-controllers, %s names the overlay's usernames: the test lost its point", o.GetName())
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

// TestKargoControllersSettingRefusesABadRegex: the setting's values are
// copied into the policies' CEL as they are, into raw literals, never
// evaluated: a regex with quotes, written to break out of its literal and
// match every user, builds to literals holding exactly it. An invalid
// regex (that one; one that does not parse; one that parses only once
// anchored) is refused by the API server when the policy is stored, not
// when a Promotion is judged; a valid regex with quotes is taken. The
// chart refuses an invalid regex when it renders.
func TestKargoControllersSettingRefusesABadRegex(t *testing.T) {
	t.Parallel()
	const users = "system:serviceaccount:kargo:kargo-controller"
	for _, tc := range []struct {
		regex   string
		refused bool
	}{
		{`^a'].exists(x, true) || ['$`, true},
		{`(`, true},
		{`a)|(b`, true},
		{`kargo-shard-'eu'|o'brien`, false},
	} {
		prefix := "e2e-" + randomTag() + "-"
		checked := 0
		for _, o := range widenedInstall(t, prefix, users, tc.regex, "gate-people") {
			if o.GetKind() != "ValidatingAdmissionPolicy" || !strings.Contains(o.GetName(), "pause-gate") || strings.HasSuffix(o.GetName(), "kargo-api") {
				continue
			}
			checked++
			conds, _, _ := unstructured.NestedSlice(o.Object, "spec", "matchConditions")
			expr, _ := conds[0].(map[string]any)["expression"].(string)
			pieces := strings.Split(expr, "'''")
			if len(pieces) != 7 || pieces[1] != users || pieces[3] != tc.regex || pieces[5] != "^(?:(?:)"+tc.regex+"(?:))$" {
				t.Errorf("regex %s: %s's condition holds other literals than the setting's: %q", tc.regex, o.GetName(), expr)
			}
			_, err := env.dyn.Resource(vaPolicies).Create(ctx, o, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			switch {
			case tc.refused && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "invalid matches argument")):
				t.Errorf("regex %s: storing %s: %v, want refused as an invalid matches argument", tc.regex, o.GetName(), err)
			case !tc.refused && err != nil:
				t.Errorf("regex %s: storing %s: %v", tc.regex, o.GetName(), err)
			}
		}
		if checked != 2 {
			t.Errorf("regex %s: checked %d policies, want the pause gate and the people gate", tc.regex, checked)
		}
	}
	out, err := helmCommand(t.TempDir(), "template", "kargo-latch", filepath.Join(env.cluster.Root, chartPath),
		"--set", "pauseGate.kargoControllerRegex=(").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "error parsing regexp: missing closing )") {
		t.Errorf("helm template with the regex (: %v, want it refused naming the regex's error\n%s", err, out)
	}
	// The chart writes the setting into r'''…''' literals too, and so
	// refuses what would end one, or make a username of nothing, or split
	// one username into two.
	for _, tc := range []struct {
		set, want string
	}{
		{`pauseGate.kargoControllerRegex=o'brien`, "pauseGate.kargoControllerRegex may not hold a single quote"},
		{`pauseGate.kargoControllers[0]=o'brien`, `pauseGate.kargoControllers[0]: "o'brien" is not a username`},
		{`pauseGate.kargoControllers[0]=`, `pauseGate.kargoControllers[0]: "" is not a username`},
		{`pauseGate.kargoControllers[0]=a\,b`, `pauseGate.kargoControllers[0]: "a,b" is not a username`},
	} {
		out, err := helmCommand(t.TempDir(), "template", "kargo-latch", filepath.Join(env.cluster.Root, chartPath),
			"--set", tc.set).CombinedOutput()
		switch {
		case err == nil:
			t.Errorf("helm template --set %s rendered, want it refused with %q", tc.set, tc.want)
		case !strings.Contains(string(out), tc.want):
			t.Errorf("helm template --set %s: %v, want it refused with %q\n%s", tc.set, err, tc.want, out)
		}
	}
}
