package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

var projectConfigs = kargo.GroupVersion.WithResource("projectconfigs")

// TestNeverWritesProjectConfigOrEnablesAutoPromotion runs a failure, a
// pause with drain and a resume next to a ProjectConfig, and checks that
// the ProjectConfig is untouched and that the shipped RBAC could not have
// changed it, nor any Kargo status, nor resumed by itself.
func TestNeverWritesProjectConfigOrEnablesAutoPromotion(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	pc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kargo.GroupVersion.String(), "kind": "ProjectConfig",
		"metadata": map[string]any{"name": ns, "namespace": ns},
		"spec": map[string]any{"promotionPolicies": []any{
			map[string]any{"stageSelector": map[string]any{"name": "prod"}, "autoPromotionEnabled": false},
		}},
	}}
	created, err := env.dyn.Resource(projectConfigs).Namespace(ns).Create(ctx, pc, metav1.CreateOptions{})
	must(t, err)

	op := startOperator(t, ns, latch.Settings{LatchDeadline: time.Minute, DegradedGrace: time.Minute, PauseOnFailure: true, DrainOnPause: true})
	s := env.createStage(t, ns, "prod", nil)
	promoteAndLatch(t, s)
	must(t, autoPromote(ns, "prod"))
	_, err = s.FinishPromotion(ctx, "Errored")
	must(t, err)
	waitPaused(t, s, true)
	must(t, deletePause(env.lead, ns, stageRecord(t, s).Failure.Pause))
	waitPaused(t, s, false)
	// The operator has handled the pause and the resume (the label it
	// writes came and went); once it is idle, nothing of it is in flight.
	op.idle(t)
	if err := projectConfigUnchanged(ns, created); err != nil {
		t.Error(err)
	}

	// Acting as the operator's ServiceAccount: ProjectConfig writes are
	// denied, and so are Stage spec changes (the metadata-only policy).
	asOperator := dynamic.NewForConfigOrDie(env.operator)
	pcPatch := []byte(`{"spec":{"promotionPolicies":[{"stageSelector":{"name":"prod"},"autoPromotionEnabled":true}]}}`)
	if _, err := asOperator.Resource(projectConfigs).Namespace(ns).Patch(ctx, ns, types.MergePatchType, pcPatch, metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the operator's identity enabling auto-promotion (patch): %v, want Forbidden", err)
	}
	enabled := created.DeepCopy()
	must(t, unstructured.SetNestedSlice(enabled.Object, []any{
		map[string]any{"stageSelector": map[string]any{"name": "prod"}, "autoPromotionEnabled": true},
	}, "spec", "promotionPolicies"))
	if _, err := asOperator.Resource(projectConfigs).Namespace(ns).Update(ctx, enabled, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the operator's identity enabling auto-promotion (update): %v, want Forbidden", err)
	}
	if err := projectConfigUnchanged(ns, created); err != nil {
		t.Error(err)
	}
	stages := asOperator.Resource(kargo.StagesResource).Namespace(ns)
	if _, err := stages.Patch(ctx, "prod", types.MergePatchType, []byte(`{"spec":{"shard":"elsewhere"}}`), metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the operator's identity changing a Stage's spec: %v, want Forbidden", err)
	}
	if _, err := stages.Patch(ctx, "prod", types.MergePatchType, []byte(`{"metadata":{"labels":{"e2e":"ok"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("the operator's identity changing a Stage's metadata: %v, want it allowed", err)
	}
	// Marking Freight verified is opt-in (manifests/components/mark-verified):
	// the default install may not.
	freight, err := s.CurrentFreight(ctx)
	must(t, err)
	mark := []byte(`{"status":{"verifiedIn":{"prod":{"verifiedAt":"2026-11-30T08:00:00Z"}}}}`)
	if _, err := asOperator.Resource(kargo.FreightsResource).Namespace(ns).Patch(ctx, freight, types.MergePatchType, mark, metav1.PatchOptions{}, "status"); !apierrors.IsForbidden(err) {
		t.Errorf("the operator's identity marking Freight verified: %v, want Forbidden", err)
	}

	for _, a := range []authorizationv1.ResourceAttributes{
		{Namespace: ns, Verb: "update", Group: kargo.GroupVersion.Group, Resource: "projectconfigs"},
		{Namespace: ns, Verb: "patch", Group: kargo.GroupVersion.Group, Resource: "projectconfigs"},
		{Namespace: ns, Verb: "patch", Group: kargo.GroupVersion.Group, Resource: "stages", Subresource: "status"},
		{Namespace: ns, Verb: "patch", Group: kargo.GroupVersion.Group, Resource: "promotions", Subresource: "status"},
		{Namespace: ns, Verb: "delete", Group: "kargo-latch.io", Resource: "stagepauses"},
		{Namespace: ns, Verb: "delete", Group: kargo.GroupVersion.Group, Resource: "stages"},
		{Namespace: ns, Verb: "create", Group: kargo.GroupVersion.Group, Resource: "promotions"},
		{Namespace: ns, Verb: "patch", Group: kargo.GroupVersion.Group, Resource: "freights", Subresource: "status"},
		{Namespace: ns, Verb: "get", Group: kargo.GroupVersion.Group, Resource: "freights"},
		// Unused, so not granted: the operator never reads ProjectConfigs
		// and writes StagePause status only with merge patches.
		{Namespace: ns, Verb: "get", Group: kargo.GroupVersion.Group, Resource: "projectconfigs"},
		{Namespace: ns, Verb: "list", Group: kargo.GroupVersion.Group, Resource: "projectconfigs"},
		{Namespace: ns, Verb: "update", Group: "kargo-latch.io", Resource: "stagepauses", Subresource: "status"},
	} {
		if mayServiceAccount(t, "kargo-latch", a) {
			t.Errorf("the operator's ServiceAccount may %s %s/%s; the shipped RBAC must not allow it", a.Verb, a.Resource, a.Subresource)
		}
	}
}

// projectConfigUnchanged reads the ProjectConfig back and says how it
// differs from created: another resourceVersion (any write, even one that
// restores the content), or autoPromotionEnabled of prod not false. A read
// that fails is an error too: the check must not pass for want of an
// answer.
func projectConfigUnchanged(ns string, created *unstructured.Unstructured) error {
	got, err := env.dyn.Resource(projectConfigs).Namespace(ns).Get(ctx, created.GetName(), metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading ProjectConfig %s back: %w", created.GetName(), err)
	}
	if got.GetResourceVersion() != created.GetResourceVersion() {
		return fmt.Errorf("ProjectConfig %s was written (resourceVersion %s -> %s)", created.GetName(), created.GetResourceVersion(), got.GetResourceVersion())
	}
	policies, _, _ := unstructured.NestedSlice(got.Object, "spec", "promotionPolicies")
	for _, p := range policies {
		policy, _ := p.(map[string]any)
		if name, _, _ := unstructured.NestedString(policy, "stageSelector", "name"); name != "prod" {
			continue
		}
		if enabled, found, _ := unstructured.NestedBool(policy, "autoPromotionEnabled"); !found || enabled {
			return fmt.Errorf("ProjectConfig %s: autoPromotionEnabled of prod is %v (set: %v), want false", created.GetName(), enabled, found)
		}
		return nil
	}
	return fmt.Errorf("ProjectConfig %s has no promotion policy for prod any more", created.GetName())
}

// TestProjectConfigCheckFailsOnAWrite injects what the check above exists
// to catch: a write to the ProjectConfig (as a faulty operator would make
// it, enabling auto-promotion; and one that writes the same policy back),
// and a ProjectConfig that cannot be read. Each must fail the check.
func TestProjectConfigCheckFailsOnAWrite(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	pc := func(name string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": kargo.GroupVersion.String(), "kind": "ProjectConfig",
			"metadata": map[string]any{"name": name, "namespace": ns},
			"spec": map[string]any{"promotionPolicies": []any{
				map[string]any{"stageSelector": map[string]any{"name": "prod"}, "autoPromotionEnabled": false},
			}},
		}}
	}
	created, err := env.dyn.Resource(projectConfigs).Namespace(ns).Create(ctx, pc(ns), metav1.CreateOptions{})
	must(t, err)
	if err := projectConfigUnchanged(ns, created); err != nil {
		t.Fatalf("untouched: %v", err)
	}
	enable := []byte(`{"spec":{"promotionPolicies":[{"stageSelector":{"name":"prod"},"autoPromotionEnabled":true}]}}`)
	_, err = env.dyn.Resource(projectConfigs).Namespace(ns).Patch(ctx, ns, types.MergePatchType, enable, metav1.PatchOptions{})
	must(t, err)
	if err := projectConfigUnchanged(ns, created); err == nil {
		t.Error("the check passed after auto-promotion was enabled")
	}
	restore := []byte(`{"spec":{"promotionPolicies":[{"stageSelector":{"name":"prod"},"autoPromotionEnabled":false}]}}`)
	_, err = env.dyn.Resource(projectConfigs).Namespace(ns).Patch(ctx, ns, types.MergePatchType, restore, metav1.PatchOptions{})
	must(t, err)
	if err := projectConfigUnchanged(ns, created); err == nil {
		t.Error("the check passed after a write that restored the content")
	}
	if err := projectConfigUnchanged(ns, pc("missing")); err == nil {
		t.Error("the check passed for a ProjectConfig it could not read")
	}
}

// TestMarkVerifiedComponentGrantsOnlyItsRights: the opt-in mark-verified
// component adds reading a Freight and patching its status, and nothing
// else about Freight: no spec, no list or watch, no delete.
func TestMarkVerifiedComponentGrantsOnlyItsRights(t *testing.T) {
	t.Parallel()
	freights := func(verb, subresource string) authorizationv1.ResourceAttributes {
		return authorizationv1.ResourceAttributes{Namespace: "any-project", Verb: verb, Group: kargo.GroupVersion.Group, Resource: "freights", Subresource: subresource}
	}
	for a, want := range map[authorizationv1.ResourceAttributes]bool{
		freights("get", ""):          true,
		freights("patch", "status"):  true,
		freights("get", "status"):    true,
		freights("update", "status"): false,
		freights("patch", ""):        false,
		freights("update", ""):       false,
		freights("list", ""):         false,
		freights("watch", ""):        false,
		freights("delete", ""):       false,
		freights("create", ""):       false,
	} {
		if got := mayServiceAccount(t, markerServiceAccount, a); got != want {
			t.Errorf("with the mark-verified component, the operator may %s freights/%s: %v, want %v", a.Verb, a.Subresource, got, want)
		}
	}
}

// mayServiceAccount asks the apiserver whether a ServiceAccount of
// kargo-latch's namespace may do a.
func mayServiceAccount(t *testing.T, name string, a authorizationv1.ResourceAttributes) bool {
	t.Helper()
	sar, err := env.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               "system:serviceaccount:kargo-latch:" + name,
			Groups:             []string{"system:serviceaccounts", "system:serviceaccounts:kargo-latch", "system:authenticated"},
			ResourceAttributes: &a,
		},
	}, metav1.CreateOptions{})
	must(t, err)
	return sar.Status.Allowed
}

// RBAC grants patch on freights/status whole; the component's admission
// policy narrows it: the operator may only add verifiedIn entries. Tried as
// the operator's identity on a real Freight.
func TestMarkVerifiedGuardAllowsOnlyNewVerifiedInEntries(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	s := env.createStage(t, ns, "test", nil)
	_, err := s.FinishPromotion(ctx, "Succeeded")
	must(t, err)
	freight, err := s.CurrentFreight(ctx)
	must(t, err)
	must(t, s.MarkVerified(ctx, freight, time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)))
	must(t, patchFreightStatus(ns, freight, map[string]any{"approvedFor": map[string]any{"uat": map[string]any{"approvedAt": "2026-11-30T08:00:00Z"}}}))

	asOperator := dynamic.NewForConfigOrDie(env.marker).Resource(kargo.FreightsResource).Namespace(ns)
	patch := func(status map[string]any) error {
		body, _ := json.Marshal(map[string]any{"status": status})
		_, err := asOperator.Patch(ctx, freight, types.MergePatchType, body, metav1.PatchOptions{}, "status")
		return err
	}
	for name, status := range map[string]map[string]any{
		"change Kargo's verifiedAt":   {"verifiedIn": map[string]any{"test": map[string]any{"verifiedAt": "2026-11-30T09:00:00Z"}}},
		"remove Kargo's verifiedIn":   {"verifiedIn": map[string]any{"test": nil}},
		"approve for another Stage":   {"approvedFor": map[string]any{"prod": map[string]any{"approvedAt": "2026-11-30T09:00:00Z"}}},
		"remove an approval":          {"approvedFor": nil},
		"move the Freight's presence": {"currentlyIn": map[string]any{"prod": map[string]any{"since": "2026-11-30T09:00:00Z"}}},
	} {
		if err := patch(status); !apierrors.IsForbidden(err) {
			t.Errorf("%s: got %v, want Forbidden by the mark-verified guard", name, err)
		}
	}
	must(t, patch(map[string]any{"verifiedIn": map[string]any{"qa": map[string]any{"verifiedAt": "2026-11-30T09:00:00Z"}}}))
	f := freightOnServer(t, ns, freight)
	if at, _ := verifiedAt(f, "test"); at != "2026-11-30T08:00:00Z" {
		t.Errorf("Kargo's verifiedAt became %s", at)
	}
	if at, _ := verifiedAt(f, "qa"); at != "2026-11-30T09:00:00Z" {
		t.Errorf("the added entry reads %q", at)
	}
}

// Review finding M4: the shipped kargo-latch-resumer role lets resume see
// Kargo's own holds. A resumer bound to that role alone resumes a Stage
// Kargo holds, and resume names the hold without a warning. The role reads
// Stages and never writes them.
func TestResumerRoleSeesKargosHolds(t *testing.T) {
	t.Parallel()
	ns, prod, good := latchedProd(t)
	rollback := rollBack(t, prod, good)
	if _, errOut, code := runCLI(t, env.cluster.UserConfig(devToken), "pause", "prod", "-n", ns); code != 0 {
		t.Fatalf("pause: exit %d: %s", code, errOut)
	}
	waitPaused(t, prod, true)

	out, errOut, code := runCLI(t, env.cluster.UserConfig(resumerToken), "resume", "prod", "-n", ns)
	hold := "Stage prod: Kargo itself still holds auto-promotion from Warehouse/warehouse at Freight " + good + " (by kubernetes:dev, promotion " + rollback
	if code != 0 || !strings.Contains(out, "Stage prod resumed") || !strings.Contains(out, hold) || errOut != "" {
		t.Errorf("resume by the shipped resumer role: exit %d, stdout %q, stderr %q; want the hold, and no warning", code, out, errOut)
	}
	waitPaused(t, prod, false)

	stages := func(verb string) authorizationv1.ResourceAttributes {
		return authorizationv1.ResourceAttributes{Namespace: ns, Verb: verb, Group: kargo.GroupVersion.Group, Resource: "stages"}
	}
	for a, want := range map[authorizationv1.ResourceAttributes]bool{
		stages("get"): true, stages("list"): true, stages("watch"): true,
		stages("update"): false, stages("patch"): false, stages("delete"): false, stages("promote"): false,
		{Namespace: ns, Verb: "patch", Group: kargo.GroupVersion.Group, Resource: "stages", Subresource: "status"}: false,
		{Namespace: ns, Verb: "create", Group: kargo.GroupVersion.Group, Resource: "promotions"}:                   false,
	} {
		if got := mayUser(t, "resumer", a); got != want {
			t.Errorf("the shipped resumer role may %s %s/%s: %v, want %v", a.Verb, a.Resource, a.Subresource, got, want)
		}
	}
}

// mayUser asks the apiserver whether the test user may do a.
func mayUser(t *testing.T, user string, a authorizationv1.ResourceAttributes) bool {
	t.Helper()
	sar, err := env.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{User: user, Groups: []string{"system:authenticated"}, ResourceAttributes: &a},
	}, metav1.CreateOptions{})
	must(t, err)
	return sar.Status.Allowed
}
