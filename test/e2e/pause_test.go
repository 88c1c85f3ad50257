package e2e

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

func TestFailurePausesAndTheGateHolds(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	op := startOperator(t, ns, fastSettings())
	prod := env.createStage(t, ns, "prod", map[string]string{api.PauseOnFailureAnnotation: "true"})
	qa := env.createStage(t, ns, "qa", nil)
	promoteAndLatch(t, prod)

	_, err := prod.FinishPromotion(ctx, "Failed")
	must(t, err)
	waitPaused(t, prod, true)
	pauses := env.listPauses(t, ns)
	if len(pauses) != 1 {
		t.Fatalf("%d StagePauses after one failure, want 1", len(pauses))
	}
	p := pauses[0]
	if reason, _, _ := unstructured.NestedString(p.Object, "spec", "reason"); reason != string(latch.ReasonPromotionFailed) {
		t.Errorf("pause reason = %q, want PromotionFailed", reason)
	}
	if refs := p.GetOwnerReferences(); len(refs) != 1 || refs[0].Kind != "Stage" || refs[0].Name != "prod" {
		t.Errorf("pause ownerReferences = %+v, want the Stage prod", refs)
	}
	if r := stageRecord(t, prod); r.Failure == nil || r.Failure.Pause != p.GetName() || len(r.Pauses) != 1 {
		t.Errorf("record failure %+v, pauses %v; want the failure to name pause %s", r.Failure, r.Pauses, p.GetName())
	}

	// The API server reads the pause from an informer of its own: the gate
	// is in force once a dry run is refused, and then stays so.
	waitShippedGateRefuses(t, ns, "prod")
	err = autoPromote(ns, "prod")
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "prod") || !strings.Contains(err.Error(), p.GetName()) {
		t.Fatalf("Kargo's auto-promotion to a paused Stage: %v; want 403 naming the Stage and the pause", err)
	}
	if _, err := driver.CreatePromotion(ctx, env.dev, ns, "prod", "kubernetes:dev"); err != nil {
		t.Errorf("dev's Promotion to the paused Stage was refused: %v", err)
	}
	if err := autoPromote(ns, qa.Name); err != nil {
		t.Errorf("auto-promotion to another Stage was refused: %v", err)
	}
	// The Event is made beside the label's patch, not before it.
	waitEvent(t, prod, api.ReasonStagePaused)
	if n := env.eventCount(t, prod, api.ReasonStagePaused); n != 1 {
		t.Errorf("%d StagePaused Events, want 1", n)
	}
	if got := op.metric("kargo_latch_pauses_total", "stage", "prod", "reason", "PromotionFailed"); got != 1 {
		t.Errorf("kargo_latch_pauses_total = %v, want 1", got)
	}

	u, err := prod.Get(ctx)
	must(t, err)
	refreshBefore := u.GetAnnotations()[kargo.RefreshAnnotation]
	must(t, deletePause(env.lead, ns, p.GetName()))
	waitPaused(t, prod, false)
	u, err = prod.Get(ctx)
	must(t, err)
	if refresh := u.GetAnnotations()[kargo.RefreshAnnotation]; refresh == "" || refresh == refreshBefore {
		t.Errorf("refresh annotation %q after resume (was %q), want a new token", refresh, refreshBefore)
	}
	waitEvent(t, prod, api.ReasonStageResumed)
	waitGate(t, ns, "prod", false)
	// The sync that removed the label handled the resume; once the
	// operator is idle, any sync after it is over too.
	op.idle(t)
	if n := len(env.listPauses(t, ns)); n != 0 {
		t.Errorf("%d StagePauses after the resume, want 0: the failure paused again", n)
	}
}

func TestGateHoldsWithoutTheOperator(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	env.createStage(t, ns, "prod", nil)
	must(t, autoPromote(ns, "prod"))
	start := time.Now()
	must(t, createPause(env.dev, pause(ns, "stop", "prod", "Manual")))
	waitGate(t, ns, "prod", true)
	t.Logf("no operator running: the gate denied auto-promotion %v after the pause (%v)", time.Since(start).Round(time.Millisecond), autoPromote(ns, "prod"))
	must(t, deletePause(env.lead, ns, "stop"))
	waitGate(t, ns, "prod", false)
}

func TestRights(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	s := env.createStage(t, ns, "prod", nil)
	must(t, createPause(env.dev, pause(ns, "dev-pause", "prod", "Manual")))
	if err := deletePause(env.dev, ns, "dev-pause"); !apierrors.IsForbidden(err) {
		t.Errorf("dev deleting a pause: %v, want Forbidden by RBAC", err)
	}
	stages := env.dev.Resource(kargo.StagesResource).Namespace(ns)
	if _, err := stages.Patch(ctx, s.Name, types.MergePatchType, []byte(`{"spec":{"shard":"x"}}`), metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("dev editing a Stage: %v, want Forbidden", err)
	}
	if _, err := stages.Patch(ctx, s.Name, types.MergePatchType, []byte(`{"metadata":{"labels":{"kargo-latch.io/paused":null}}}`), metav1.PatchOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("dev removing the paused label: %v, want Forbidden", err)
	}
	must(t, deletePause(env.resumer, ns, "dev-pause"))
}

func TestOptInPolicies(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	// The opt-in policies are cluster-wide; bind them to this test's
	// namespace only, so that parallel tests keep the default behaviour.
	_, err := env.kube.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, []byte(`{"metadata":{"labels":{"e2e-opt-in":"true"}}}`), metav1.PatchOptions{})
	must(t, err)
	objs, err := readShipped("components/resume-requires-projectconfig-update/resume-policy.yaml", "components/gate-people/gate-people.yaml")
	must(t, err)
	for _, o := range objs {
		if o.GetKind() == "ValidatingAdmissionPolicyBinding" {
			must(t, unstructured.SetNestedMap(o.Object, map[string]any{"matchLabels": map[string]any{"e2e-opt-in": "true"}}, "spec", "matchResources", "namespaceSelector"))
		}
	}
	must(t, applyObjects(objs))
	prod := env.createStage(t, ns, "prod", nil)
	must(t, createPause(env.dev, pause(ns, "p1", "prod", "Manual")))

	waitFor(t, "the opt-in people gate to deny dev", func() bool {
		_, err := driver.CreatePromotion(ctx, env.dev, ns, "prod", "kubernetes:dev")
		return apierrors.IsForbidden(err)
	})
	if _, err := driver.CreatePromotion(ctx, env.lead, ns, "prod", "kubernetes:lead"); err != nil && !apierrors.IsForbidden(err) {
		t.Errorf("lead's Promotion: %v", err)
	}
	var denied error
	waitFor(t, "the resume policy to deny a resumer without ProjectConfig rights", func() bool {
		denied = deletePause(env.resumer, ns, "p1")
		return apierrors.IsForbidden(denied)
	})
	if !strings.Contains(denied.Error(), "ProjectConfig") {
		t.Errorf("denial %q does not name the missing right", denied)
	}
	must(t, deletePause(env.lead, ns, "p1"))

	// Kubernetes' own controllers are not held up by the resume policy:
	// the garbage collector deletes a failure's pause with its Stage, and
	// the namespace controller deletes the rest with the namespace.
	stage, err := prod.Get(ctx)
	must(t, err)
	owned := pause(ns, "prod-failed", "prod", string(latch.ReasonPromotionFailed))
	owned.SetOwnerReferences([]metav1.OwnerReference{{APIVersion: kargo.GroupVersion.String(), Kind: "Stage", Name: "prod", UID: stage.GetUID()}})
	must(t, createPause(env.dyn, owned))
	must(t, createPause(env.dev, pause(ns, "p2", "*", "ProjectPause")))
	must(t, env.dyn.Resource(kargo.StagesResource).Namespace(ns).Delete(ctx, "prod", metav1.DeleteOptions{}))
	waitFor(t, "the garbage collector to delete the pause the Stage owned", func() bool {
		left := env.listPauses(t, ns)
		return len(left) == 1 && left[0].GetName() == "p2"
	})
	must(t, env.kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}))
	waitLong(t, "the namespace controller to delete the namespace and its pause", 90*time.Second, func() bool {
		_, err := env.kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

func TestDrainAbortsOnlyQueuedAutoPromotions(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	startOperator(t, ns, latch.Settings{LatchDeadline: time.Minute, DegradedGrace: time.Minute, DrainOnPause: true})
	env.createStage(t, ns, "prod", nil)
	create := func(client interface{}, actor string, phase string) string {
		t.Helper()
		c := env.kargoCtl
		if client != nil {
			c = env.dev
		}
		p, err := driver.CreatePromotion(ctx, c, ns, "prod", actor)
		must(t, err)
		must(t, env.kargo.SetPromotionPhase(ctx, ns, p.GetName(), phase))
		return p.GetName()
	}
	queuedAuto := create(nil, "", "Pending")
	queuedController := create(nil, "controller:kargo-api", "Pending")
	runningAuto := create(nil, "", "Running")
	devQueued := create(true, "kubernetes:dev", "Pending")

	must(t, createPause(env.dev, pause(ns, "stop", "prod", "Manual")))
	var drained []string
	waitFor(t, "status.drained", func() bool {
		u, err := env.dyn.Resource(v1alpha1.StagePausesResource).Namespace(ns).Get(ctx, "stop", metav1.GetOptions{})
		must(t, err)
		drained, _, _ = unstructured.NestedStringSlice(u.Object, "status", "drained")
		return len(drained) > 0
	})
	want := []string{queuedAuto, queuedController}
	if strings.Join(drained, ",") != strings.Join(slices.Sorted(slices.Values(want)), ",") {
		t.Errorf("drained %v, want exactly %v", drained, slices.Sorted(slices.Values(want)))
	}
	for name, wantAbort := range map[string]bool{queuedAuto: true, queuedController: true, runningAuto: false, devQueued: false} {
		u, err := env.dyn.Resource(kargo.PromotionsResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		must(t, err)
		_, aborted := u.GetAnnotations()[kargo.AbortAnnotation]
		if aborted != wantAbort {
			t.Errorf("Promotion %s aborted = %v, want %v", name, aborted, wantAbort)
		}
	}
}

// TestProjectWidePauseDrainsEveryStageWithOneRead: the drains of a
// project-wide pause abort the queued auto-promotions of every Stage, and
// share one live read of the project's Promotions instead of one per Stage.
func TestProjectWidePauseDrainsEveryStageWithOneRead(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	var promotionLists atomic.Int64
	op := startOperatorWith(t, env.operator, ns, latch.Settings{LatchDeadline: time.Minute, DegradedGrace: time.Minute, DrainOnPause: true},
		refusing(func(r *http.Request) error {
			if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/promotions") && r.URL.Query().Get("watch") != "true" {
				promotionLists.Add(1)
			}
			return nil
		}))
	var queued, kept []string
	for _, name := range []string{"dev", "qa", "prod"} {
		env.createStage(t, ns, name, nil)
		auto, err := driver.CreatePromotion(ctx, env.kargoCtl, ns, name, "")
		must(t, err)
		must(t, env.kargo.SetPromotionPhase(ctx, ns, auto.GetName(), "Pending"))
		person, err := driver.CreatePromotion(ctx, env.dev, ns, name, "kubernetes:dev")
		must(t, err)
		must(t, env.kargo.SetPromotionPhase(ctx, ns, person.GetName(), "Pending"))
		queued, kept = append(queued, auto.GetName()), append(kept, person.GetName())
	}
	// The Promotion cache's first list is made in the background: counted
	// from once it holds all six, only the drains' reads remain.
	waitFor(t, "the operator's Promotion cache to hold the six queued Promotions", func() bool {
		return op.metric(promotionsCachedMetric) == 6
	})
	op.idle(t)
	listsBefore := promotionLists.Load()

	must(t, createPause(env.dev, pause(ns, "big-red-button", v1alpha1.AllStages, "ProjectPause")))
	var drained []string
	waitFor(t, "every queued auto-promotion in status.drained", func() bool {
		u, err := env.dyn.Resource(v1alpha1.StagePausesResource).Namespace(ns).Get(ctx, "big-red-button", metav1.GetOptions{})
		must(t, err)
		drained, _, _ = unstructured.NestedStringSlice(u.Object, "status", "drained")
		t.Logf("drained %v", drained)
		return len(drained) >= len(queued)
	})
	if got, want := strings.Join(drained, ","), strings.Join(slices.Sorted(slices.Values(queued)), ","); got != want {
		t.Errorf("drained %s, want exactly %s", got, want)
	}
	for _, name := range append(append([]string(nil), queued...), kept...) {
		u, err := env.dyn.Resource(kargo.PromotionsResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		must(t, err)
		_, aborted := u.GetAnnotations()[kargo.AbortAnnotation]
		if want := slices.Contains(queued, name); aborted != want {
			t.Errorf("Promotion %s aborted = %v, want %v", name, aborted, want)
		}
	}
	if n := promotionLists.Load() - listsBefore; n != 1 {
		t.Errorf("the drains of 3 Stages listed Promotions %d times, want 1", n)
	}
}

func TestProjectWidePause(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	op := startOperator(t, ns, fastSettings())
	const n = 50
	stages := make([]*driver.Stage, n)
	for i := range stages {
		stages[i] = env.createStage(t, ns, "stage-"+string(rune('a'+i/26))+string(rune('a'+i%26)), nil)
	}
	// The timing starts once the operator has handled every new Stage, up
	// to reporting each without status a second after its creation.
	waitFor(t, "every new Stage to be reported without status", func() bool {
		return op.metric("kargo_latch_invalid_input_total", "input", "status") == n
	})
	op.idle(t)

	start := time.Now()
	must(t, createPause(env.dev, pause(ns, "big-red-button", v1alpha1.AllStages, "ProjectPause")))
	waitGate(t, ns, stages[0].Name, true)
	waitGate(t, ns, stages[n-1].Name, true)
	deniedAfter := time.Since(start)
	labeled := waitAllLabels(t, ns, n, true)
	took := time.Since(start)
	// How fast is make bench's figure 2, measured against a baseline there.
	t.Logf("project-wide pause: gate denied after %v; all %d Stages labeled after %v", deniedAfter.Round(time.Millisecond), labeled, took.Round(time.Millisecond))

	start = time.Now()
	must(t, deletePause(env.lead, ns, "big-red-button"))
	waitAllLabels(t, ns, 0, true)
	t.Logf("project-wide resume: all labels gone after %v", time.Since(start).Round(time.Millisecond))
	waitGate(t, ns, stages[n/2].Name, false)
}

// waitAllLabels waits until exactly want Stages of ns carry the paused label.
func waitAllLabels(t *testing.T, ns string, want int, _ bool) int {
	t.Helper()
	var got int
	waitFor(t, "paused labels", func() bool {
		l, err := env.dyn.Resource(kargo.StagesResource).Namespace(ns).List(context.Background(), metav1.ListOptions{LabelSelector: api.PausedLabel + "=true"})
		must(t, err)
		got = len(l.Items)
		return got == want
	})
	return got
}

func TestPauseBadInput(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	op := startOperator(t, ns, fastSettings())

	// A pause for a Stage that does not exist waits, and applies when the
	// Stage appears.
	must(t, createPause(env.dev, pause(ns, "early", "later", "")))
	waitFor(t, "the early pause's status", func() bool {
		return pauseCondition(t, ns, "early") == "False/StageNotFound"
	})
	later := env.createStage(t, ns, "later", nil)
	waitPaused(t, later, true)
	waitFor(t, "the early pause's status to follow", func() bool {
		return pauseCondition(t, ns, "early") == "True/Covering"
	})
	// An empty reason reads as Manual (counted just after the label is
	// stored).
	waitFor(t, "pauses_total{reason=Manual} for an empty reason", func() bool {
		return op.metric("kargo_latch_pauses_total", "stage", "later", "reason", "Manual") == 1
	})

	// A 10 KB message is refused by the CRD's schema, with a clear error.
	big := pause(ns, "big", "later", "Manual")
	must(t, unstructured.SetNestedField(big.Object, strings.Repeat("x", 10<<10), "spec", "message"))
	if err := createPause(env.dev, big); !apierrors.IsInvalid(err) {
		t.Errorf("a 10 KB message: %v, want Invalid", err)
	}

	// Two pauses: resuming needs both gone.
	must(t, createPause(env.dev, pause(ns, "second", "later", "Manual")))
	must(t, deletePause(env.lead, ns, "early"))
	// The record names the pauses the operator saw covering the Stage.
	waitFor(t, "the record to name only the second pause", func() bool {
		return slices.Equal(stageRecord(t, later).Pauses, []string{"second"})
	})
	if !paused(t, later) {
		t.Error("Stage resumed while a second pause still covers it")
	}
	must(t, deletePause(env.lead, ns, "second"))
	waitPaused(t, later, false)

	// A pause in a namespace that is not a Kargo project covers nothing.
	other := env.newProject(t)
	startOperator(t, other, fastSettings())
	must(t, createPause(env.dev, pause(other, "lost", "*", "Manual")))
	waitFor(t, "the lost pause's status", func() bool {
		return pauseCondition(t, other, "lost") == "False/StageNotFound"
	})

	// The label is put back if someone removes it.
	must(t, createPause(env.dev, pause(ns, "third", "later", "Manual")))
	waitPaused(t, later, true)
	_, err := env.dyn.Resource(kargo.StagesResource).Namespace(ns).Patch(ctx, "later", types.MergePatchType, []byte(`{"metadata":{"labels":{"kargo-latch.io/paused":null}}}`), metav1.PatchOptions{})
	must(t, err)
	waitPaused(t, later, true)
	waitEvent(t, later, api.ReasonPauseLabelRestored)
}

func pauseCondition(t *testing.T, ns, name string) string {
	t.Helper()
	u, err := env.dyn.Resource(v1alpha1.StagePausesResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	must(t, err)
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == v1alpha1.ConditionActive {
			return m["status"].(string) + "/" + m["reason"].(string)
		}
	}
	return ""
}

func readShipped(paths ...string) ([]*unstructured.Unstructured, error) {
	var files []string
	for _, p := range paths {
		files = append(files, env.cluster.Root+"/manifests/"+p)
	}
	return readObjects(files...)
}
