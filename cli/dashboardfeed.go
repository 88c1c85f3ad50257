package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/cli/dashboard"
	"github.com/kargo-latch/kargo-latch/kargo"
)

// projectsResource is Kargo's cluster-scoped Project: a user who may not
// list Stages in every namespace may still list the projects.
var projectsResource = kargo.GroupVersion.WithResource("projects")

// feed is the dashboard's reading of the cluster: the same watches as
// `status -w`, in every project the user may read, judged by the same rows.
type feed struct {
	client dynamic.Interface
	// only is the one project to show (-n); "" for every readable one.
	only string
	// fallback is the kubeconfig's namespace, shown when the user may list
	// neither every Stage nor the projects.
	fallback string

	stages, pauses, freight []*source
	problems                map[string]string
}

// watch starts the watches and returns the snapshot the page shows.
func (f *feed) watch(ctx context.Context, changed chan<- struct{}) (func() dashboard.Snapshot, error) {
	f.problems = map[string]string{}
	namespaces, err := f.projects(ctx)
	if err != nil {
		return nil, err
	}
	for _, ns := range namespaces {
		stages, err := watchSource(ctx, sourceSpec{client: f.client, gvr: kargo.StagesResource, ns: ns, changed: changed})
		if err != nil {
			if len(namespaces) == 1 {
				return nil, explainRead(err, "stages", ns)
			}
			f.problems[ns] = explainRead(err, "stages", ns).Error()
			continue
		}
		f.stages = append(f.stages, stages)
		if pauses, err := watchSource(ctx, sourceSpec{client: f.client, gvr: v1alpha1.StagePausesResource, ns: ns, changed: changed}); err != nil {
			f.problems[ns] = "The page cannot show pauses: " + explainRead(err, "stagepauses.kargo-latch.io", ns).Error()
		} else {
			f.pauses = append(f.pauses, pauses)
		}
		// Freight gives aliases only: without the right, names do.
		if freight, err := watchSource(ctx, sourceSpec{client: f.client, gvr: kargo.FreightsResource, ns: ns, changed: changed}); err == nil {
			f.freight = append(f.freight, freight)
		}
	}
	return f.snapshot, nil
}

// projects are the namespaces to watch: -n's; else all at once where the
// user may list Stages everywhere; else each Kargo project in which they
// may; else the kubeconfig's namespace.
func (f *feed) projects(ctx context.Context) ([]string, error) {
	if f.only != "" {
		return []string{f.only}, nil
	}
	_, err := f.client.Resource(kargo.StagesResource).List(ctx, metav1.ListOptions{Limit: 1})
	if err == nil {
		return []string{metav1.NamespaceAll}, nil
	}
	if !apierrors.IsForbidden(err) {
		return nil, err
	}
	l, err := f.client.Resource(projectsResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		f.problems[""] = fmt.Sprintf("You may list neither every Stage nor Kargo's projects, so this page shows project %s only (the kubeconfig's namespace); use -n PROJECT for another.", f.fallback)
		return []string{f.fallback}, nil
	}
	var out []string
	for _, p := range l.Items {
		_, err := f.client.Resource(kargo.StagesResource).Namespace(p.GetName()).List(ctx, metav1.ListOptions{Limit: 1})
		if err == nil {
			out = append(out, p.GetName())
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("you may read the Stages of none of the %d Kargo projects", len(l.Items))
	}
	return out, nil
}

func explainRead(err error, resource, ns string) error {
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("you may not list %s in project %s: %s", resource, ns, apiMessage(err))
	}
	return err
}

func objectsOf(sources []*source) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, s := range sources {
		out = append(out, s.objects()...)
	}
	return out
}

func (f *feed) snapshot() dashboard.Snapshot {
	stageObjects := objectsOf(f.stages)
	pauses := pausesOf(objectsOf(f.pauses))
	byKey := make(map[string]*unstructured.Unstructured, len(stageObjects))
	for _, u := range stageObjects {
		byKey[dashboard.Key(u.GetNamespace(), u.GetName())] = u
	}
	aliases := freightAliases(objectsOf(f.freight))
	s := dashboard.Snapshot{Problems: f.problems}
	for _, r := range rows(stageObjects, pauses) {
		b, err := json.Marshal(r)
		if err != nil {
			continue // a row is plain data: never
		}
		st := dashboard.Stage{Project: r.Project, Name: r.Stage, Status: b}
		st.Upstream, st.Direct = dashboard.UpstreamOf(byKey[dashboard.Key(r.Project, r.Stage)])
		for _, name := range r.Freight {
			if a := aliases[dashboard.Key(r.Project, name)]; a != "" {
				if st.Aliases == nil {
					st.Aliases = map[string]string{}
				}
				st.Aliases[name] = a
			}
		}
		s.Stages = append(s.Stages, st)
	}
	for _, p := range pauses {
		s.Pauses = append(s.Pauses, pauseView(p))
	}
	return s
}

// freightAliases maps project/name to each Freight's alias.
func freightAliases(freight []*unstructured.Unstructured) map[string]string {
	out := make(map[string]string, len(freight))
	for _, u := range freight {
		alias, _, _ := unstructured.NestedString(u.Object, "alias")
		if alias == "" {
			alias = u.GetLabels()["kargo.akuity.io/alias"]
		}
		if alias != "" {
			out[dashboard.Key(u.GetNamespace(), u.GetName())] = alias
		}
	}
	return out
}

// pauseView says who made a pause: the operator for a failure's (it alone
// sets the derived name), else whoever the pausing client named.
func pauseView(p v1alpha1.StagePause) dashboard.Pause {
	v := dashboard.Pause{Project: p.Namespace, Name: p.Name, Stage: p.Spec.Stage, Reason: p.EffectiveReason(),
		Message: p.Spec.Message, Since: p.CreationTimestamp.Time, Drained: p.Status.Drained,
		Resuming: p.DeletionTimestamp != nil, By: p.Annotations[v1alpha1.PausedByAnnotation]}
	if p.Status.Since != nil {
		v.Since = p.Status.Since.Time
	}
	if _, ok := p.Annotations[v1alpha1.DerivedNameAnnotation]; ok {
		v.By = "kargo-latch, on the failure"
	}
	return v
}

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
	if out.Pause, out.PauseWhy, err = a.may(ctx, ns, "create", "kargo-latch-pauser"); err != nil {
		return out, err
	}
	out.Resume, out.ResumeWhy, err = a.may(ctx, ns, "delete", "kargo-latch-resumer")
	return out, err
}

func (a *actor) may(ctx context.Context, ns, verb, role string) (bool, string, error) {
	review := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
		"spec": map[string]any{"resourceAttributes": map[string]any{
			"namespace": ns, "verb": verb, "group": v1alpha1.GroupVersion.Group, "resource": "stagepauses"}},
	}}
	got, err := a.client.Resource(accessReviews).Create(ctx, review, metav1.CreateOptions{})
	if err != nil {
		return false, "", err
	}
	allowed, _, _ := unstructured.NestedBool(got.Object, "status", "allowed")
	if allowed {
		return true, "", nil
	}
	why := fmt.Sprintf("you may not %s stagepauses.kargo-latch.io in project %s (ClusterRole %s, bound in the project, grants it)", verb, ns, role)
	if reason, _, _ := unstructured.NestedString(got.Object, "status", "reason"); reason != "" {
		why += "; the API server says: " + reason
	}
	return false, why, nil
}

// maxEvents bounds the Events a Stage's page shows.
const maxEvents = 50

func (a *actor) Events(ctx context.Context, ns, stage string) ([]dashboard.Event, error) {
	l, err := a.client.Resource(schema.GroupVersionResource{Version: "v1", Resource: "events"}).Namespace(ns).List(ctx, metav1.ListOptions{
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

// eventOf reads an Event: its last time is lastTimestamp, else the newer
// API's eventTime, else when it was made.
func eventOf(obj map[string]any) dashboard.Event {
	var e corev1.Event
	_ = runtime.DefaultUnstructuredConverter.FromUnstructured(obj, &e)
	last := e.LastTimestamp.Time
	if last.IsZero() {
		last = e.EventTime.Time
	}
	if last.IsZero() {
		last = e.CreationTimestamp.Time
	}
	count := e.Count
	if e.Series != nil && e.Series.Count > count {
		count = e.Series.Count
	}
	return dashboard.Event{Type: e.Type, Reason: e.Reason, Message: e.Message, Count: count, Last: last,
		Source: e.Source.Component + e.ReportingController}
}
