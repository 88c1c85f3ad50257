package e2e

import (
	"context"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// A failure's pause is made before its record is stored. While the Stage
// cannot be written, a person deletes the pause: the gate lifts at once, and
// once the Stage can be written again the pause stays deleted (its failure,
// judged again, finds it held for resume instead of making it anew), and the
// Stage is reported resumed.
func TestResumeIsNeverUndoneByAFailingStore(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	op := startOperator(t, ns, fastSettings())
	prod := env.createStage(t, ns, "prod", map[string]string{api.PauseOnFailureAnnotation: "true"})
	promoteAndLatch(t, prod)

	lift := denyOperatorStageWrites(t, ns, prod)
	x := failAndResumeWhileDenied(t, ns, prod)
	lift()
	checkResumedForGood(t, ns, prod, x)
	op.idle(t)
	if n := len(env.listPauses(t, ns)); n != 0 {
		t.Errorf("%d StagePauses after the resume, want 0: the resume was undone", n)
	}
}

// The same, with the operator killed while the pause is the only trace of
// the failure: the next process finds the pause held for resume.
func TestResumeIsNeverUndoneAcrossACrash(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	op := newMeteredProcess(t, env.operator, "--namespace", ns, "--latch-deadline", "1m", "--health-probe-bind-address", "0", "-v", "2")
	op.start()
	prod := env.createStage(t, ns, "prod", map[string]string{api.PauseOnFailureAnnotation: "true"})
	promoteAndLatch(t, prod)

	lift := denyOperatorStageWrites(t, ns, prod)
	_, err := prod.FinishPromotion(ctx, "Failed")
	must(t, err)
	x := waitFailurePause(t, ns)
	op.kill()
	must(t, deletePause(env.lead, ns, x))
	waitGate(t, ns, prod.Name, false)
	lift()
	op.start()
	checkResumedForGood(t, ns, prod, x)
	// The restarted run has judged the Stage (its sync released the pause);
	// once it is idle, no later sync can make the pause again.
	op.caughtUp(t)
	if n := len(env.listPauses(t, ns)); n != 0 {
		t.Errorf("%d StagePauses after the restart, want 0: the resume was undone", n)
	}
}

// failAndResumeWhileDenied fails prod's promotion while the operator cannot
// write the Stage, waits for the failure's pause, deletes it as a person
// may, and returns its name.
func failAndResumeWhileDenied(t *testing.T, ns string, prod *driver.Stage) string {
	t.Helper()
	_, err := prod.FinishPromotion(ctx, "Failed")
	must(t, err)
	x := waitFailurePause(t, ns)
	waitGate(t, ns, prod.Name, true)
	// The fault bites: the record that names the pause is not stored.
	if r := stageRecord(t, prod); r.Phase != latch.PhaseLatched || r.Failure != nil {
		t.Fatalf("record %s, failure %+v: the Stage was written despite the denial", r.Phase, r.Failure)
	}
	must(t, deletePause(env.lead, ns, x))
	// Deleting resumes at once, though the operator still holds the object.
	waitGate(t, ns, prod.Name, false)
	held, err := env.dyn.Resource(v1alpha1.StagePausesResource).Namespace(ns).Get(ctx, x, metav1.GetOptions{})
	must(t, err)
	if held.GetDeletionTimestamp() == nil {
		t.Fatalf("pause %s is not being deleted", x)
	}
	return x
}

// waitFailurePause waits for the one StagePause of ns, a failure's, checks
// that it carries the resume finalizer, and returns its name.
func waitFailurePause(t *testing.T, ns string) string {
	t.Helper()
	var x string
	waitFor(t, "the failure's pause", func() bool {
		pauses := env.listPauses(t, ns)
		if len(pauses) == 1 {
			x = pauses[0].GetName()
			if !slices.Contains(pauses[0].GetFinalizers(), v1alpha1.ResumeFinalizer) {
				t.Errorf("the failure's pause has finalizers %v, want %s", pauses[0].GetFinalizers(), v1alpha1.ResumeFinalizer)
			}
		}
		return x != ""
	})
	return x
}

// checkResumedForGood waits until the operator, able to write again, has
// recorded the failure with its pause resumed and let the pause go.
func checkResumedForGood(t *testing.T, ns string, prod *driver.Stage, x string) {
	t.Helper()
	waitFor(t, "the held pause to be released", func() bool {
		_, err := env.dyn.Resource(v1alpha1.StagePausesResource).Namespace(ns).Get(ctx, x, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	r := stageRecord(t, prod)
	if r.Phase != latch.PhaseFailed || r.Failure == nil || r.Failure.Pause != x || len(r.Pauses) != 0 {
		t.Errorf("record %s, failure %+v, pauses %v; want Failed, naming %s, not paused", r.Phase, r.Failure, r.Pauses, x)
	}
	if paused(t, prod) {
		t.Error("the Stage is labeled paused after the resume")
	}
	waitEvent(t, prod, api.ReasonStageResumed)
	u, err := prod.Get(ctx)
	must(t, err)
	if u.GetAnnotations()[kargo.RefreshAnnotation] == "" {
		t.Error("Kargo was not asked to refresh the resumed Stage")
	}
}

// denyOperatorStageWrites makes the API server refuse the operator's writes
// to the Stages of ns (a test-only ValidatingAdmissionPolicy, bound to ns),
// proves the denial is in force, and returns what lifts it.
func denyOperatorStageWrites(t *testing.T, ns string, s *driver.Stage) (lift func()) {
	t.Helper()
	return denyStageWrites(t, ns, s, env.operator, operatorUser)
}

// denyStageWrites is denyOperatorStageWrites for the operator that runs as
// user, with config.
func denyStageWrites(t *testing.T, ns string, s *driver.Stage, config *rest.Config, user string) (lift func()) {
	t.Helper()
	name := "e2e-deny-stage-writes-" + ns
	policy := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"failurePolicy": "Fail",
			"matchConstraints": map[string]any{"resourceRules": []any{map[string]any{
				"apiGroups": []any{"kargo.akuity.io"}, "apiVersions": []any{"*"}, "operations": []any{"UPDATE"}, "resources": []any{"stages"},
			}}},
			"validations": []any{map[string]any{
				"expression": "request.userInfo.username != '" + user + "'",
				"message":    "e2e: the operator may not write Stages now", "reason": "Forbidden",
			}},
		},
	}}
	binding := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"policyName": name, "validationActions": []any{"Deny"},
			"matchResources": map[string]any{"namespaceSelector": map[string]any{"matchLabels": map[string]any{"kubernetes.io/metadata.name": ns}}},
		},
	}}
	must(t, applyObjects([]*unstructured.Unstructured{policy, binding}))
	asOperator := dynamic.NewForConfigOrDie(config)
	probe := []byte(`{"metadata":{"annotations":{"e2e/probe":"x"}}}`)
	waitFor(t, "the denial of the operator's Stage writes", func() bool {
		_, err := asOperator.Resource(kargo.StagesResource).Namespace(ns).Patch(ctx, s.Name, types.MergePatchType, probe, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return apierrors.IsForbidden(err)
	})
	lifted := false
	lift = func() {
		if lifted {
			return
		}
		lifted = true
		must(t, env.dyn.Resource(vapBindings).Delete(context.Background(), name, metav1.DeleteOptions{}))
		must(t, env.dyn.Resource(vaPolicies).Delete(context.Background(), name, metav1.DeleteOptions{}))
		waitFor(t, "the denial to lift", func() bool {
			_, err := asOperator.Resource(kargo.StagesResource).Namespace(ns).Patch(ctx, s.Name, types.MergePatchType, probe, metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
			return err == nil
		})
	}
	t.Cleanup(lift)
	return lift
}

const operatorUser = "system:serviceaccount:kargo-latch:kargo-latch"

var (
	vaPolicies  = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicies"}
	vapBindings = schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: "validatingadmissionpolicybindings"}
)

// The operator may patch a StagePause for one thing only: to remove its own
// finalizer once a resume is recorded. It cannot edit, relabel or delete a
// pause, nor remove anyone else's finalizer.
func TestOperatorMayOnlyReleaseItsFinalizer(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	asOperator := dynamic.NewForConfigOrDie(env.operator)
	pauses := func(c dynamic.Interface) dynamic.ResourceInterface {
		return c.Resource(v1alpha1.StagePausesResource).Namespace(ns)
	}
	p := pause(ns, "held", "prod", "PromotionFailed")
	p.SetFinalizers([]string{v1alpha1.ResumeFinalizer, "example.com/keep"})
	_, err := pauses(asOperator).Create(ctx, p, metav1.CreateOptions{})
	must(t, err)
	for what, patch := range map[string]string{
		"edit its spec":              `{"spec":{"stage":"other"}}`,
		"relabel it":                 `{"metadata":{"labels":{"kargo-latch.io/reason":"Manual"}}}`,
		"remove another's finalizer": `{"metadata":{"finalizers":["kargo-latch.io/resume"]}}`,
		"remove every finalizer":     `{"metadata":{"finalizers":null}}`,
		"annotate it":                `{"metadata":{"annotations":{"x":"y"}}}`,
		// An owner that does not exist: the garbage collector would delete it.
		"give it an owner": `{"metadata":{"ownerReferences":[{"apiVersion":"v1","kind":"ConfigMap","name":"gone","uid":"00000000-0000-0000-0000-000000000001"}]}}`,
	} {
		// (The CRD itself refuses any change of spec, as Invalid.)
		if _, err := pauses(asOperator).Patch(ctx, "held", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
			t.Errorf("the operator may %s: %v, want it refused", what, err)
		}
	}
	if err := pauses(asOperator).Delete(ctx, "held", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the operator may delete a pause: %v, want Forbidden", err)
	}
	must(t, deletePause(env.lead, ns, "held"))
	if _, err := pauses(asOperator).Patch(ctx, "held", types.MergePatchType, []byte(`{"metadata":{"finalizers":["example.com/keep"]}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("the operator may not release its finalizer: %v", err)
	}
	// Let the object go (the example finalizer's owner would).
	_, err = env.dyn.Resource(v1alpha1.StagePausesResource).Namespace(ns).Patch(ctx, "held", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
	must(t, err)
}
