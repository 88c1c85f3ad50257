package cli

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

func feedObject(gvr schema.GroupVersionResource, kind, ns, name string, fields map[string]any) *unstructured.Unstructured {
	obj := map[string]any{"apiVersion": gvr.GroupVersion().String(), "kind": kind,
		"metadata": map[string]any{"namespace": ns, "name": name, "creationTimestamp": "2026-12-08T10:00:00Z"}}
	for k, v := range fields {
		obj[k] = v
	}
	return &unstructured.Unstructured{Object: obj}
}

// The page's Stages are the status rows, with the pipeline's edges and the
// Freight's aliases; the pauses say who made them.
func TestDashboardSnapshotIsTheStatusRows(t *testing.T) {
	prod := feedObject(kargo.StagesResource, "Stage", "p", "prod", map[string]any{
		"spec": map[string]any{"requestedFreight": []any{map[string]any{"sources": map[string]any{"stages": []any{"test"}}}}},
		"status": map[string]any{"health": map[string]any{"status": "Healthy"},
			"freightHistory": []any{map[string]any{"id": "c1", "items": map[string]any{"Warehouse/w": map[string]any{"name": "f1", "origin": map[string]any{"kind": "Warehouse", "name": "w"}}}}}},
	})
	failure := feedObject(v1alpha1.StagePausesResource, "StagePause", "p", "prod-degraded-1", map[string]any{"spec": map[string]any{"stage": "prod", "reason": "Degraded"}})
	failure.SetAnnotations(map[string]string{v1alpha1.DerivedNameAnnotation: "prod-degraded-1"})
	// A pauser's decoy with the operator's annotation is no operator pause.
	decoy := feedObject(v1alpha1.StagePausesResource, "StagePause", "p", "prod-decoy", map[string]any{"spec": map[string]any{"stage": "prod"}})
	decoy.SetAnnotations(map[string]string{v1alpha1.DerivedNameAnnotation: "prod-decoy", v1alpha1.PausedByAnnotation: "mallory"})
	rec := inCycle(latch.PhaseFailed, func(r *latch.Record) {
		r.Failure = &latch.Failure{Reason: "Degraded", At: time.Now(), Pause: "prod-degraded-1"}
	})
	prod.SetAnnotations(map[string]string{api.StateAnnotation: rec.Encode()})
	manual := feedObject(v1alpha1.StagePausesResource, "StagePause", "p", "prod-x", map[string]any{"spec": map[string]any{"stage": "prod", "message": "INC-1"}})
	manual.SetAnnotations(map[string]string{v1alpha1.PausedByAnnotation: "dev"})
	freight := feedObject(kargo.FreightsResource, "Freight", "p", "f1", map[string]any{"alias": "brave-fox"})
	recent := time.Now().Add(-time.Minute).UTC().Format(time.RFC3339)
	bypass := feedObject(eventsResource, "Event", "p", "prod.1", map[string]any{"type": "Warning", "reason": "GateBypassed",
		"involvedObject": map[string]any{"kind": "Stage", "name": "prod"}, "lastTimestamp": recent})
	old := feedObject(eventsResource, "Event", "p", "prod.2", map[string]any{"type": "Warning", "reason": "Old",
		"involvedObject": map[string]any{"kind": "Stage", "name": "prod"}, "lastTimestamp": "2026-01-01T00:00:00Z"})
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		kargo.StagesResource: "StageList", kargo.FreightsResource: "FreightList",
		v1alpha1.StagePausesResource: "StagePauseList", eventsResource: "EventList",
	}, prod, failure, manual, decoy, freight, bypass, old)
	f := &feed{client: client, only: "p"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	snapshot, err := f.watch(ctx, make(chan struct{}, 1))
	if err != nil {
		t.Fatal(err)
	}
	s := snapshot()
	if len(s.Stages) != 1 {
		t.Fatalf("stages %+v", s.Stages)
	}
	st := s.Stages[0]
	var row StageStatus
	if err := json.Unmarshal(st.Status, &row); err != nil {
		t.Fatal(err)
	}
	if !row.Paused || row.Health != "Healthy" || len(row.Pauses) != 3 {
		t.Errorf("row %+v, want paused by both, Healthy", row)
	}
	if d := cmp.Diff([]string{"test"}, st.Upstream); d != "" || st.Direct {
		t.Errorf("upstream (-want +got):\n%s direct %v", d, st.Direct)
	}
	if d := cmp.Diff(map[string]string{"f1": "brave-fox"}, st.Aliases); d != "" {
		t.Errorf("aliases (-want +got):\n%s", d)
	}
	if len(st.Warnings) != 1 || st.Warnings[0].Reason != "GateBypassed" {
		t.Errorf("warnings %+v, want the recent GateBypassed alone", st.Warnings)
	}
	by := map[string]string{}
	for _, p := range s.Pauses {
		by[p.Name] = p.ClaimedBy
		if p.ByOperator {
			by[p.Name] = "the operator"
		}
	}
	if d := cmp.Diff(map[string]string{"prod-degraded-1": "the operator", "prod-x": "dev", "prod-decoy": "mallory"}, by); d != "" {
		t.Errorf("who paused (-want +got):\n%s", d)
	}
}

// Without the right to list Stages everywhere, the page shows each Kargo
// project where the user may, and says nothing of the others.
func TestDashboardFindsTheReadableProjects(t *testing.T) {
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		kargo.StagesResource: "StageList", projectsResource: "ProjectList",
	}, feedObject(projectsResource, "Project", "", "mine", nil), feedObject(projectsResource, "Project", "", "theirs", nil))
	client.PrependReactor("list", "stages", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if ns := a.GetNamespace(); ns != "mine" {
			return true, nil, apierrors.NewForbidden(kargo.StagesResource.GroupResource(), "", nil)
		}
		return false, nil, nil
	})
	f := &feed{client: client, fallback: "default", problems: map[string]string{}}
	got, err := f.projects(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff([]string{"mine"}, got); d != "" {
		t.Errorf("projects (-want +got):\n%s", d)
	}
}

// A pause never waits on, nor fails by, the question of who is pausing.
func TestPauseWithoutAnAnswerToWhoAmI(t *testing.T) {
	client := fakeClient(feedObject(kargo.StagesResource, "Stage", "p", "prod", nil))
	client.PrependReactor("create", "selfsubjectreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(selfSubjectReviews.GroupResource(), "", nil)
	})
	name, err := createPause(context.Background(), client, "p", "prod", "Manual", "")
	if err != nil {
		t.Fatal(err)
	}
	got, err := client.Resource(v1alpha1.StagePausesResource).Namespace("p").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := got.GetAnnotations()[v1alpha1.PausedByAnnotation]; ok {
		t.Errorf("annotations %v, want no paused-by", got.GetAnnotations())
	}
}

// A read that was refused at start is said once, or left out; a watch
// refused later is a problem the page shows until it reads again.
func TestDashboardReadHealth(t *testing.T) {
	changed := make(chan struct{}, 1)
	h := newReadHealth(changed)
	heard := h.hearing("stages", "p")
	heard(apierrors.NewForbidden(kargo.StagesResource.GroupResource(), "", nil))
	if got := h.problems(nil)["p"]; got == "" || !h.failingIn("stages", "p") {
		t.Fatalf("problems %q, want the refusal", got)
	}
	select {
	case <-changed:
	default:
		t.Error("a new failure did not ask for a new snapshot")
	}
	heard(nil)
	if got := h.problems(map[string]string{"q": "static"}); len(got) != 1 || got["q"] != "static" {
		t.Errorf("problems %v, want the static one alone once the watch reads again", got)
	}
}

// Stages readable everywhere but pauses only per project: the projects are
// where the Stages are, each watched on its own; without the StagePause
// CRD, everywhere at once.
func TestDashboardProjectsWhenPausesArePerProject(t *testing.T) {
	for _, c := range []struct {
		name  string
		err   error
		wants []string
	}{
		{"pauses refused everywhere", apierrors.NewForbidden(v1alpha1.StagePausesResource.GroupResource(), "", nil), []string{"a", "b"}},
		{"no StagePause CRD", apierrors.NewNotFound(v1alpha1.StagePausesResource.GroupResource(), ""), []string{""}},
	} {
		t.Run(c.name, func(t *testing.T) {
			client := fakeClient(feedObject(kargo.StagesResource, "Stage", "b", "prod", nil), feedObject(kargo.StagesResource, "Stage", "a", "prod", nil),
				feedObject(kargo.StagesResource, "Stage", "a", "qa", nil))
			client.PrependReactor("list", "stagepauses", func(a k8stesting.Action) (bool, runtime.Object, error) {
				if a.GetNamespace() == "" {
					return true, nil, c.err
				}
				return false, nil, nil
			})
			f := &feed{client: client, fallback: "default", problems: map[string]string{}}
			got, err := f.projects(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(c.wants, got); d != "" {
				t.Errorf("projects (-want +got):\n%s", d)
			}
		})
	}
}
