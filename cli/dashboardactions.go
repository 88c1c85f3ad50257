package cli

import (
	"context"
	"fmt"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/cli/dashboard"
	"github.com/kargo-latch/kargo-latch/kargo"
)

// actor is the dashboard's pause and resume: the CLI's own, with the
// user's credentials.
type actor struct {
	client dynamic.Interface
}

func (a *actor) Pause(ctx context.Context, ns, stage, reason, message string) (string, error) {
	if reason == "" {
		reason = v1alpha1.ReasonManual
	}
	if err := checkReason(reason, true); err != nil {
		return "", err
	}
	if len(message) > maxMessage {
		return "", fmt.Errorf("the message is %d characters long; a StagePause's message holds at most %d", len(message), maxMessage)
	}
	name, err := createPause(ctx, a.client, ns, stage, reason, message)
	if err != nil {
		return "", err
	}
	what := "Stage " + stage + " is"
	if stage == v1alpha1.AllStages {
		what = "every Stage of project " + ns + " is"
	}
	return fmt.Sprintf("StagePause %s/%s created: %s paused (reason %s).", ns, name, what, reason), nil
}

func (a *actor) Resume(ctx context.Context, ns, stage string) (string, error) {
	done, err := resumePauses(ctx, a.client, ns, stage)
	if err != nil {
		return "", err
	}
	said := fmt.Sprintf("StagePause %s deleted: ", strings.Join(done.deleted, ", "))
	switch {
	case stage == v1alpha1.AllStages:
		said += "project " + ns + " resumed."
	case len(done.projectWide) > 0:
		said += "Stage " + stage + " is still paused by the project-wide StagePause " + strings.Join(done.projectWide, ", ") + "."
	default:
		said += "Stage " + stage + " resumed; kargo-latch asks Kargo to re-attempt auto-promotion now. Kargo's own holds, if any, still hold (shown on the Stage)."
	}
	return said, nil
}

var accessReviews = schema.GroupVersionResource{Group: "authorization.k8s.io", Version: "v1", Resource: "selfsubjectaccessreviews"}

// Access asks the API server whether the user may create and delete
// StagePauses in the project: pausing and resuming.
func (a *actor) Access(ctx context.Context, ns string) (dashboard.Access, error) {
	var out dashboard.Access
	var err error
	if out.Pause, out.PauseWhy, err = a.may(ctx, ns, "create", v1alpha1.StagePausesResource, "kargo-latch-pauser"); err != nil {
		return out, err
	}
	if out.Resume, out.ResumeWhy, err = a.may(ctx, ns, "delete", v1alpha1.StagePausesResource, "kargo-latch-resumer"); err != nil {
		return out, err
	}
	// A watch already open outlives a RoleBinding removed: the API server
	// checks rights when a request starts. So the rights to read are asked
	// again too, and a right lost is said before the watch next restarts.
	for _, r := range []schema.GroupVersionResource{kargo.StagesResource, v1alpha1.StagePausesResource} {
		ok, why, err := a.may(ctx, ns, "list", r, "kargo-latch-viewer")
		if err != nil {
			return out, err
		}
		if !ok {
			out.ReadWhy = append(out.ReadWhy, why+"; what the page shows of them may be old")
		}
	}
	return out, nil
}

func (a *actor) may(ctx context.Context, ns, verb string, gvr schema.GroupVersionResource, role string) (bool, string, error) {
	review := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
		"spec": map[string]any{"resourceAttributes": map[string]any{
			"namespace": ns, "verb": verb, "group": gvr.Group, "resource": gvr.Resource}},
	}}
	got, err := a.client.Resource(accessReviews).Create(ctx, review, metav1.CreateOptions{})
	if err != nil {
		return false, "", err
	}
	allowed, _, _ := unstructured.NestedBool(got.Object, "status", "allowed")
	if allowed {
		return true, "", nil
	}
	why := fmt.Sprintf("you may not %s %s.%s in project %s (ClusterRole %s, bound in the project, grants it)", verb, gvr.Resource, gvr.Group, ns, role)
	if reason, _, _ := unstructured.NestedString(got.Object, "status", "reason"); reason != "" {
		why += "; the API server says: " + reason
	}
	return false, why, nil
}

// maxEvents bounds the Events a Stage's page shows.
const maxEvents = 50

func (a *actor) Events(ctx context.Context, ns, stage string) ([]dashboard.Event, error) {
	l, err := a.client.Resource(eventsResource).Namespace(ns).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Stage,involvedObject.name=" + stage,
	})
	if err != nil {
		return nil, err
	}
	out := make([]dashboard.Event, 0, len(l.Items))
	for _, u := range l.Items {
		out = append(out, eventOf(u.Object))
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Last.After(out[j].Last) })
	if len(out) > maxEvents {
		out = out[:maxEvents]
	}
	return out, nil
}
