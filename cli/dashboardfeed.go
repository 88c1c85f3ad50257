package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/kargo-latch/kargo-latch/api"
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

	stages, pauses, freight, warnings []*source
	// problems are those found at start, by project; health adds the
	// watches failing now.
	problems map[string]string
	health   *readHealth
	// noPauses are the namespaces whose pauses could not be read at start.
	noPauses []string
	// judged caches each Stage's row by project/name; snapshot alone uses
	// it, from one goroutine at a time.
	judged map[string]judged
}

// watch starts the watches and returns the snapshot the page shows.
func (f *feed) watch(ctx context.Context, changed chan<- struct{}) (func() dashboard.Snapshot, error) {
	f.problems = map[string]string{}
	f.health = newReadHealth(changed)
	namespaces, err := f.projects(ctx)
	if err != nil {
		return nil, err
	}
	spec := func(gvr schema.GroupVersionResource, ns string) sourceSpec {
		return sourceSpec{client: f.client, gvr: gvr, ns: ns, changed: changed, heard: f.health.hearing(gvr.Resource, ns)}
	}
	// A watch that could not start is not watched: what it lacks is said
	// once (problems), or left out (Freight, Events), not as a failing read.
	notWatched := func(gvr schema.GroupVersionResource, ns string) { f.health.hearing(gvr.Resource, ns)(nil) }
	for _, ns := range namespaces {
		stages, err := watchSource(ctx, spec(kargo.StagesResource, ns))
		if err != nil {
			if len(namespaces) == 1 {
				return nil, explainRead(err, "stages", ns)
			}
			f.problems[ns] = explainRead(err, "stages", ns).Error()
			notWatched(kargo.StagesResource, ns)
			continue
		}
		f.stages = append(f.stages, stages)
		if pauses, err := watchSource(ctx, spec(v1alpha1.StagePausesResource, ns)); err != nil {
			f.problems[ns] = "The page cannot show pauses (a Stage's own label says whether it is paused): " +
				explainRead(err, "stagepauses.kargo-latch.io", ns).Error()
			f.noPauses = append(f.noPauses, ns)
			notWatched(v1alpha1.StagePausesResource, ns)
		} else {
			f.pauses = append(f.pauses, pauses)
		}
		// Freight gives aliases only: without the right, names do. The
		// Stages' Warnings (refusals, gate bypasses) are shown where the
		// user may read Events.
		if freight, err := watchSource(ctx, spec(kargo.FreightsResource, ns)); err == nil {
			f.freight = append(f.freight, freight)
		} else {
			notWatched(kargo.FreightsResource, ns)
		}
		warnings := spec(eventsResource, ns)
		warnings.tweak = stageWarnings
		if events, err := watchSource(ctx, warnings); err == nil {
			f.warnings = append(f.warnings, events)
		} else {
			notWatched(eventsResource, ns)
		}
	}
	return f.snapshot, nil
}

// pausesUnknown reports whether the pauses of ns cannot be read now.
func (f *feed) pausesUnknown(ns string) bool {
	return slices.Contains(f.noPauses, ns) || slices.Contains(f.noPauses, metav1.NamespaceAll) ||
		f.health.failingIn(v1alpha1.StagePausesResource.Resource, ns)
}

// projects are the namespaces to watch: -n's; else all at once where the
// user may list Stages everywhere; else each Kargo project in which they
// may; else the kubeconfig's namespace.
func (f *feed) projects(ctx context.Context) ([]string, error) {
	if f.only != "" {
		return []string{f.only}, nil
	}
	// Everywhere at once only where both Stages and their pauses may be
	// listed everywhere: people are often bound per project for pauses.
	_, err := f.client.Resource(kargo.StagesResource).List(ctx, metav1.ListOptions{Limit: 1})
	stagesEverywhere := err == nil
	if stagesEverywhere {
		_, err = f.client.Resource(v1alpha1.StagePausesResource).List(ctx, metav1.ListOptions{Limit: 1})
		if apierrors.IsNotFound(err) { // no StagePause CRD: the Stages alone, said per project
			err = nil
		}
	}
	if err == nil {
		return []string{metav1.NamespaceAll}, nil
	}
	if !apierrors.IsForbidden(err) {
		return nil, err
	}
	if stagesEverywhere { // the pauses per project: the projects are where the Stages are
		return f.stageNamespaces(ctx)
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

// stageNamespaces are the namespaces holding Stages, read from one list of
// them all (names only would do; the API server sends them whole).
func (f *feed) stageNamespaces(ctx context.Context) ([]string, error) {
	l, err := f.client.Resource(kargo.StagesResource).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var out []string
	for _, u := range l.Items {
		if !slices.Contains(out, u.GetNamespace()) {
			out = append(out, u.GetNamespace())
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		f.problems[""] = "No Stages in any namespace yet; a project created later shows after a restart of the dashboard."
		return []string{f.fallback}, nil
	}
	return out, nil
}

func explainRead(err error, resource, ns string) error {
	where := "in project " + ns
	if ns == metav1.NamespaceAll {
		where = "in every project"
	}
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("you may not list %s %s: %s", resource, where, apiMessage(err))
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

// judged is one Stage's status row, encoded, kept while the Stage and the
// pauses that cover it are the versions it was made from: with a thousand
// Stages, a change judges one Stage again, not all of them.
type judged struct {
	from         string
	status       []byte
	failurePause string
	freight      []string
}

func (f *feed) snapshot() dashboard.Snapshot {
	stageObjects := objectsOf(f.stages)
	sort.Slice(stageObjects, func(i, j int) bool {
		a, b := stageObjects[i], stageObjects[j]
		return a.GetNamespace() < b.GetNamespace() || a.GetNamespace() == b.GetNamespace() && a.GetName() < b.GetName()
	})
	pauses := pausesOf(objectsOf(f.pauses))
	aliases := freightAliases(objectsOf(f.freight))
	warnings := recentWarnings(objectsOf(f.warnings), time.Now())
	s := dashboard.Snapshot{Problems: f.health.problems(f.problems), Failing: f.health.anyFailing()}
	if f.judged == nil {
		f.judged = map[string]judged{}
	}
	seen := make(map[string]judged, len(stageObjects))
	// The operator's pauses are those a Stage's record names as its
	// failure's: pausers cannot write Stages, so the credit cannot be
	// forged (the derived-name annotation can).
	byOperator := map[string]bool{}
	for _, u := range stageObjects {
		k := dashboard.Key(u.GetNamespace(), u.GetName())
		j := f.judge(u, pauses)
		seen[k] = j
		if j.failurePause != "" {
			byOperator[dashboard.Key(u.GetNamespace(), j.failurePause)] = true
		}
		st := dashboard.Stage{Project: u.GetNamespace(), Name: u.GetName(), Status: j.status}
		st.Upstream, st.Direct = dashboard.UpstreamOf(u)
		st.Warnings = warnings[k]
		if f.pausesUnknown(st.Project) {
			st.PausesUnknown = true
			st.LabelPaused = u.GetLabels()[api.PausedLabel] == "true"
		}
		var aliasSig strings.Builder
		for _, name := range j.freight {
			if a := aliases[dashboard.Key(st.Project, name)]; a != "" {
				if st.Aliases == nil {
					st.Aliases = map[string]string{}
				}
				st.Aliases[name] = a
				aliasSig.WriteString(name + "=" + a + ",")
			}
		}
		st.Version = fmt.Sprintf("%s|%s|%v%v|%s", j.from, warningsSig(st.Warnings), st.PausesUnknown, st.LabelPaused, aliasSig.String())
		s.Stages = append(s.Stages, st)
	}
	f.judged = seen // Stages gone are forgotten
	for _, p := range pauses {
		s.Pauses = append(s.Pauses, pauseView(p, byOperator[dashboard.Key(p.Namespace, p.Name)]))
	}
	return s
}

// judge is u's status row (the CLI's row), from the cache while u and the
// pauses covering it are unchanged.
func (f *feed) judge(u *unstructured.Unstructured, pauses []v1alpha1.StagePause) judged {
	from := u.GetResourceVersion()
	for _, p := range covering(u.GetNamespace(), u.GetName(), pauses) {
		from += "," + p.Name + "@" + p.ResourceVersion
	}
	k := dashboard.Key(u.GetNamespace(), u.GetName())
	if j, ok := f.judged[k]; ok && j.from == from && from != "" {
		return j
	}
	r := row(u, pauses)
	b, err := json.Marshal(r)
	if err != nil {
		b = []byte("{}") // a row is plain data: never
	}
	j := judged{from: from, status: b, freight: r.Freight}
	if r.Record != nil && r.Record.Failure != nil {
		j.failurePause = r.Record.Failure.Pause
	}
	return j
}

func warningsSig(events []dashboard.Event) string {
	var b strings.Builder
	for _, e := range events {
		fmt.Fprintf(&b, "%s/%d/%d/%s;", e.Reason, e.Count, e.Last.UnixNano(), e.Message)
	}
	return b.String()
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

var eventsResource = schema.GroupVersionResource{Version: "v1", Resource: "events"}

// stageWarnings selects the Warning Events on Stages: kargo-latch's
// refusals and gate bypasses, and Kargo's own Warnings.
func stageWarnings(o *metav1.ListOptions) {
	o.FieldSelector = "involvedObject.kind=Stage,type=Warning"
}

// Stage cards show the newest maxWarnings Warnings of the last
// warningsWindow; a Stage's page shows all its Events.
const (
	maxWarnings    = 3
	warningsWindow = time.Hour
)

// recentWarnings are the recent Warnings by Stage (project/name), newest
// first.
func recentWarnings(events []*unstructured.Unstructured, now time.Time) map[string][]dashboard.Event {
	out := map[string][]dashboard.Event{}
	for _, u := range events {
		e := eventOf(u.Object)
		if now.Sub(e.Last) > warningsWindow {
			continue
		}
		name, _, _ := unstructured.NestedString(u.Object, "involvedObject", "name")
		k := dashboard.Key(u.GetNamespace(), name)
		out[k] = append(out[k], e)
	}
	for k, list := range out {
		// Newest first; the same moment (Events have whole seconds) by
		// reason and message, so that the three shown do not change with
		// the cache's order.
		sort.Slice(list, func(i, j int) bool {
			a, b := list[i], list[j]
			if !a.Last.Equal(b.Last) {
				return a.Last.After(b.Last)
			}
			return a.Reason+a.Message < b.Reason+b.Message
		})
		out[k] = list[:min(len(list), maxWarnings)]
	}
	return out
}

// pauseView says who made a pause: the operator, for the pause a Stage's
// record names as its failure's; else whoever the pausing client named.
func pauseView(p v1alpha1.StagePause, byOperator bool) dashboard.Pause {
	v := dashboard.Pause{Project: p.Namespace, Name: p.Name, Stage: p.Spec.Stage, Reason: p.EffectiveReason(),
		Message: p.Spec.Message, Since: p.CreationTimestamp.Time, Drained: p.Status.Drained,
		Resuming: p.DeletionTimestamp != nil, ClaimedBy: p.Annotations[v1alpha1.PausedByAnnotation], ByOperator: byOperator}
	if p.Status.Since != nil {
		v.Since = p.Status.Since.Time
	}
	return v
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
