package e2e

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// The opt-in requester mark (manifests/components/requested-by; Helm:
// pauseGate.requestedBy.enabled): while a pause covers a Stage, the API
// server marks every Promotion and PromotionRequest created for it with
// its requester's username, kargo-latch.io/requested-by, and a guard keeps
// the mark as it was made. Its MutatingAdmissionPolicy is cluster-wide, so
// each test here installs its own copy, bound to its own namespace only
// (isolatePolicies): no other test's Promotion meets a mutating policy, nor
// its 503 window.

// installRequestedBy installs the requested-by component, named after tag
// and bound to ns alone, and returns the name prefix of its policies.
func installRequestedBy(t *testing.T, ns string) string {
	t.Helper()
	tag := randomTag()
	prefix := "e2e-" + tag + "-"
	isolatePolicies(t, tag, buildOverlay(t, "namePrefix: "+prefix+"\n", "components/requested-by"))
	isolateNamespace(t, ns, tag)
	return prefix
}

// dryRunAs is a client for cfg's user whose every request is a dry run
// (dryRun=All): admission runs in full, mutating and validating policies
// alike, and nothing is stored, so a probe can be tried again and again.
func dryRunAs(cfg *rest.Config) dynamic.Interface {
	cfg = rest.CopyConfig(cfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			r = r.Clone(r.Context())
			q := r.URL.Query()
			q.Set("dryRun", metav1.DryRunAll)
			r.URL.RawQuery = q.Encode()
			return rt.RoundTrip(r)
		})
	}
	return dynamic.NewForConfigOrDie(cfg)
}

// waitShippedGateRefuses waits until an auto-promotion by Kargo's
// controller to the paused stage, tried as a dry run, is refused with 403
// by the shipped pause gate. Until the API server knows the pause (and the
// policy), it passes; and in the requester mark's 503 window it is refused
// with 503 instead. Any other answer fails the test. Where another policy
// refuses it too, the API server names one of them: waitDeniedBy has it
// reload its policies until it names the shipped gate.
func waitShippedGateRefuses(t *testing.T, ns, stage string) {
	t.Helper()
	as := dryRunAs(env.cluster.UserConfig(kargoCtlToken))
	waitDeniedBy(t, "the shipped gate to refuse an auto-promotion to the paused Stage "+ns+"/"+stage, "kargo-latch-pause-gate", func() error {
		_, err := driver.CreatePromotion(ctx, as, ns, stage, "")
		if err != nil && !apierrors.IsForbidden(err) && !apierrors.IsServiceUnavailable(err) {
			t.Fatalf("an auto-promotion to the paused Stage %s/%s: %v", ns, stage, err)
		}
		return err
	})
}

// waitMarked waits until the requester mark works in ns: a person's
// Promotion to the Stage prod, which a pause covers, in the shape kubectl
// sends it (no create-actor), tried as a dry run, comes back marked with
// the person's username. Until the API server has loaded the policy, it
// comes back unmarked; until it has loaded the schema of Promotions, it is
// refused with 503 (the mark's window). So this proves that the mark marks
// in ns, before a test looks for a Promotion it does not mark.
func waitMarked(t *testing.T, ns string) {
	t.Helper()
	dev := dryRunAs(env.cluster.UserConfig(devToken))
	waitFor(t, "the requester mark to mark a Promotion to the paused Stage "+ns+"/prod", func() bool {
		p, err := driver.CreatePromotion(ctx, dev, ns, "prod", "kubernetes:dev")
		if err != nil && !apierrors.IsServiceUnavailable(err) {
			t.Fatalf("a person's Promotion to the paused Stage %s/prod: %v", ns, err)
		}
		return err == nil && p.GetAnnotations()[api.RequestedByAnnotation] == "dev"
	})
}

// personPromotion is a Promotion as a person writes it for `kubectl
// create`, with annotations of the person's choosing: no create-actor
// (Kargo's webhook, which runs after the mutating policies, adds it).
func personPromotion(ns, stage string, annotations map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kargo.GroupVersion.String(), "kind": "Promotion",
		"metadata": map[string]any{"name": stage + "." + randomTag(), "namespace": ns, "annotations": annotations},
		"spec": map[string]any{
			"stage": stage, "freight": randomTag(),
			"steps": []any{map[string]any{"uses": "argocd-update", "config": map[string]any{"apps": []any{map[string]any{"name": stage}}}}},
		},
	}}
}

// markOf is the requester mark of an object, and whether it has one.
func markOf(o *unstructured.Unstructured) (string, bool) {
	by, ok := o.GetAnnotations()[api.RequestedByAnnotation]
	return by, ok
}

// TestRequestedByMarksEveryPromotionUnderAPause: with the requester mark,
// every Promotion and PromotionRequest created while a pause covers its
// Stage carries its requester's username, whatever its shape: a
// controller's Promotion that passed the gate (the shard's, stamped as a
// person's), a person's as Kargo's webhook leaves it;
// a value the caller gave is overwritten. Nothing is written for a Stage
// no pause covers.
func TestRequestedByMarksEveryPromotionUnderAPause(t *testing.T) {
	t.Parallel()
	if !strings.Contains(env.cluster.CRDSource, "real") {
		t.Skip("needs Kargo's real CRDs (../shared/kargo-crds): PromotionRequest is not among the stand-ins")
	}
	ns := env.newProject(t)
	installRequestedBy(t, ns)
	env.createStage(t, ns, "prod", nil)
	env.createStage(t, ns, "dev", nil)
	must(t, createPause(env.dev, pause(ns, "hold", "prod", "Manual")))
	// The shipped gate refuses Kargo's controller with 403, not 503.
	waitShippedGateRefuses(t, ns, "prod")
	waitMarked(t, ns)

	check := func(what string, o *unstructured.Unstructured, err error, want string) {
		t.Helper()
		if err != nil {
			t.Errorf("%s: %v", what, err)
			return
		}
		if by, ok := markOf(o); by != want || ok != (want != "") {
			t.Errorf("%s is marked requested-by %q (%v), want %q", what, by, ok, want)
		}
	}
	p, err := driver.CreatePromotion(ctx, env.kargoShard, ns, "prod", "kubernetes:"+kargoShardUser)
	check("the shard's Promotion to the paused Stage, stamped as a person's (it passes the shipped gate)", p, err, kargoShardUser)
	// A PromotionRequest carries no actor: the gate refuses the shard's (it
	// may not update the ProjectConfig) and takes that of Kargo's API
	// server (it may), which is marked.
	if _, err = driver.CreatePromotionRequest(ctx, env.kargoShard, ns, "prod"); !apierrors.IsForbidden(err) {
		t.Errorf("the shard's PromotionRequest for the paused Stage: %v, want refused by the shipped gate", err)
	}
	kargoAPI := dynamic.NewForConfigOrDie(env.cluster.UserConfig(kargoAPIToken))
	p, err = driver.CreatePromotionRequest(ctx, kargoAPI, ns, "prod")
	check("Kargo's API server's PromotionRequest for the paused Stage", p, err, kargoAPIUser)
	if _, err = driver.CreatePromotion(ctx, env.dev, ns, "prod", ""); !apierrors.IsForbidden(err) {
		t.Errorf("a person's Promotion to the paused Stage with no create-actor (no Kargo webhook here to stamp one): %v, want refused: the gate fails closed", err)
	}
	p, err = driver.CreatePromotion(ctx, env.dev, ns, "prod", "kubernetes:dev")
	check("a person's Promotion to the paused Stage as Kargo's webhook leaves it", p, err, "dev")
	p, err = env.dev.Resource(kargo.PromotionsResource).Namespace(ns).Create(ctx,
		personPromotion(ns, "prod", map[string]any{api.RequestedByAnnotation: kargoShardUser, kargo.CreateActorAnnotation: "kubernetes:dev"}), metav1.CreateOptions{})
	check("a person's Promotion to the paused Stage that names another requester", p, err, "dev")

	p, err = driver.CreatePromotion(ctx, env.kargoShard, ns, "dev", "")
	check("the shard's auto-promotion to the unpaused Stage", p, err, "")
	p, err = driver.CreatePromotionRequest(ctx, env.kargoShard, ns, "dev")
	check("the shard's PromotionRequest for the unpaused Stage", p, err, "")
	p, err = driver.CreatePromotion(ctx, env.dev, ns, "dev", "")
	check("a person's Promotion to the unpaused Stage", p, err, "")
}

// TestRequestedByCannotBeChanged: once a Promotion or PromotionRequest is
// stored, the requester mark's guard refuses an update that changes,
// removes or adds kargo-latch.io/requested-by, whoever asks (here the
// cluster's admin, whom RBAC lets do anything); it lets through an update
// that leaves the mark as it is.
func TestRequestedByCannotBeChanged(t *testing.T) {
	t.Parallel()
	if !strings.Contains(env.cluster.CRDSource, "real") {
		t.Skip("needs Kargo's real CRDs (../shared/kargo-crds): PromotionRequest is not among the stand-ins")
	}
	ns := env.newProject(t)
	guard := installRequestedBy(t, ns) + "kargo-latch-requested-by-guard"
	env.createStage(t, ns, "prod", nil)
	env.createStage(t, ns, "dev", nil)
	must(t, createPause(env.dev, pause(ns, "hold", "prod", "Manual")))
	waitShippedGateRefuses(t, ns, "prod")
	waitMarked(t, ns)

	marked, err := driver.CreatePromotion(ctx, env.dev, ns, "prod", "kubernetes:dev")
	must(t, err)
	unmarked, err := driver.CreatePromotion(ctx, env.dev, ns, "dev", "kubernetes:dev")
	must(t, err)
	request, err := driver.CreatePromotionRequest(ctx, dynamic.NewForConfigOrDie(env.cluster.UserConfig(kargoAPIToken)), ns, "prod")
	must(t, err)
	if by, _ := markOf(marked); by != "dev" {
		t.Fatalf("the Promotion to the paused Stage is marked requested-by %q, want dev (the test needs it)", by)
	}
	mark := func(value any) string {
		return `{"metadata":{"annotations":{"` + api.RequestedByAnnotation + `":` + jsonValue(value) + `}}}`
	}
	// The guard is a policy of its own, which the API server may load a
	// moment after the mark.
	waitDeniedBy(t, "the guard to refuse a change of the mark", guard, func() error {
		_, err := env.dyn.Resource(kargo.PromotionsResource).Namespace(ns).Patch(ctx, marked.GetName(), types.MergePatchType,
			[]byte(mark(kargoShardUser)), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})
	for _, tc := range []struct {
		what    string
		obj     *unstructured.Unstructured
		patch   string
		refused bool
	}{
		{"changing the mark", marked, mark(kargoShardUser), true},
		{"removing the mark", marked, mark(nil), true},
		{"adding a mark", unmarked, mark("dev"), true},
		{"changing a PromotionRequest's mark", request, mark("dev"), true},
		{"writing the mark as it is", marked, mark("dev"), false},
		{"another annotation", marked, `{"metadata":{"annotations":{"e2e.example/note":"x"}}}`, false},
	} {
		resource := kargo.PromotionsResource
		if tc.obj.GetKind() == "PromotionRequest" {
			resource = driver.PromotionRequestsResource
		}
		_, err := env.dyn.Resource(resource).Namespace(ns).Patch(ctx, tc.obj.GetName(), types.MergePatchType, []byte(tc.patch), metav1.PatchOptions{})
		switch {
		case tc.refused && !deniedBy(err, guard):
			t.Errorf("%s on %s %s: %v, want refused by %s", tc.what, tc.obj.GetKind(), tc.obj.GetName(), err, guard)
		case !tc.refused && err != nil:
			t.Errorf("%s on %s %s: %v, want allowed", tc.what, tc.obj.GetKind(), tc.obj.GetName(), err)
		}
	}
}

// jsonValue is v in JSON.
func jsonValue(v any) string {
	if v == nil {
		return "null"
	}
	return jsonString(v.(string))
}

// TestRequestedByBindingFollowsNamePrefix: kustomize knows that a
// ValidatingAdmissionPolicyBinding names its policy, not that a
// MutatingAdmissionPolicyBinding does; components/requested-by teaches it,
// so that an overlay's namePrefix keeps each binding on its policy.
func TestRequestedByBindingFollowsNamePrefix(t *testing.T) {
	t.Parallel()
	objs := widenedInstall(t, "renamed-", "system:serviceaccount:kargo:kargo-controller", "", "requested-by")
	found := map[string]bool{}
	for _, o := range objs {
		if !strings.HasSuffix(o.GetKind(), "Binding") || !strings.Contains(o.GetName(), "requested-by") {
			continue
		}
		found[o.GetKind()] = true
		if policy, _, _ := unstructured.NestedString(o.Object, "spec", "policyName"); !strings.HasPrefix(policy, "renamed-kargo-latch-requested-by") || o.GetName() != policy {
			t.Errorf("%s %s binds %q, want its own policy, renamed", o.GetKind(), o.GetName(), policy)
		}
	}
	if !found["MutatingAdmissionPolicyBinding"] || !found["ValidatingAdmissionPolicyBinding"] {
		t.Errorf("the build's requester mark has the bindings %v, want the mark's and the guard's", found)
	}
}

// TestChartRequestedByIsOptIn: the chart renders the requester mark only
// when asked to (the kustomize install's is an opt-in component too; the
// chart's defaults equal manifests/default, TestChartRendersTheKustomizeInstall),
// and, asked to on a cluster without MutatingAdmissionPolicy, refuses with
// a message that says why and what to do.
func TestChartRequestedByIsOptIn(t *testing.T) {
	t.Parallel()
	kinds := func(objs []*unstructured.Unstructured) map[string]int {
		n := map[string]int{}
		for _, o := range objs {
			n[o.GetKind()]++
		}
		return n
	}
	if n := kinds(renderChart(t, "kargo-latch", "kargo-latch", "--api-versions", mutatingPolicyAPI))["MutatingAdmissionPolicy"]; n != 0 {
		t.Errorf("the chart's defaults render %d MutatingAdmissionPolicy on a cluster that serves it, want none (opt-in)", n)
	}
	if n := kinds(renderChart(t, "kargo-latch", "kargo-latch", "--api-versions", mutatingPolicyAPI, "--set", "pauseGate.requestedBy.enabled=true"))["MutatingAdmissionPolicy"]; n != 1 {
		t.Errorf("pauseGate.requestedBy.enabled=true renders %d MutatingAdmissionPolicy, want 1", n)
	}
	out, err := helmCommand(t.TempDir(), "template", "kargo-latch", filepath.Join(env.cluster.Root, chartPath),
		"--kube-version", "1.35.0", "--set", "pauseGate.requestedBy.enabled=true").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "pauseGate.requestedBy.enabled needs MutatingAdmissionPolicy") || !strings.Contains(string(out), "--api-versions") {
		t.Errorf("helm template with the mark on Kubernetes 1.35: %v, want it refused, saying why and how to pass the API\n%s", err, out)
	}
}

// mutatingPolicyAPI is what `helm template` is told the cluster serves
// when it is to render the requester mark on a cluster that has it.
const mutatingPolicyAPI = "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy"
