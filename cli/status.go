package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// StageStatus is one row of `status`, and its JSON/YAML form.
type StageStatus struct {
	Project string `json:"project"`
	Stage   string `json:"stage"`
	Phase   string `json:"phase"`
	// Health is Kargo's health of the Stage (status.health.status) now.
	Health string   `json:"health,omitempty"`
	Paused bool     `json:"paused"`
	Reason string   `json:"reason,omitempty"`
	Pauses []string `json:"pauses,omitempty"`
	// KargoHolds are Kargo's own auto-promotion holds on the Stage (Kargo
	// v1.11.1+): a StagePause's resume does not end them.
	KargoHolds []KargoHold `json:"kargoHolds,omitempty"`
	Since      *time.Time  `json:"since,omitempty"`
	LatchedAt  *time.Time  `json:"latchedAt,omitempty"`
	// Apps are the Argo CD Applications of the Stage's health output, each
	// with when it was first seen Healthy in this cycle; absent when the
	// Stage has no per-Application data. The list stops after one more
	// than latch.MaxApps: beyond that the per-Application latch is off.
	Apps []AppStatus `json:"apps,omitempty"`
	// Freight names the Stage's current Freight (freightHistory[0]).
	Freight []string `json:"freight,omitempty"`
	// MarkedVerified is true when kargo-latch has marked every current
	// Freight verified in this Stage in this cycle, or found it so, so that
	// downstream Stages can receive it.
	MarkedVerified bool `json:"markedVerified"`
	// Analysis is the configured verification of the current cycle (the
	// Stage's spec.verification): who runs it, Kargo or kargo-latch
	// (verify-on-latch), and its phase; nil when the Stage has none. It is
	// apart from the latch, which is a verdict on health only.
	Analysis *AnalysisStatus `json:"analysis,omitempty"`
	Record   *latch.Record   `json:"record,omitempty"`
}

// KargoHold is one of Kargo's own auto-promotion holds on a Stage, as
// status.effectiveAutoPromotionHolds shows it: Kargo auto-promotes nothing
// from Origin until someone promotes that origin's current candidate
// Freight to the Stage, or resumes auto-promotion in Kargo's UI.
type KargoHold struct {
	// Origin is "Warehouse/<name>".
	Origin string `json:"origin"`
	// Freight is what the person promoted, which made the hold.
	Freight   string     `json:"freight"`
	Actor     string     `json:"actor,omitempty"`
	Promotion string     `json:"promotion,omitempty"`
	Since     *time.Time `json:"since,omitempty"`
}

// outputs are status's output formats (-o).
var outputs = []string{"table", "wide", "json", "yaml"}

type statusOptions struct {
	all    bool
	output string
	watch  bool
}

func statusCmd(kube *kubeFlags) *cobra.Command {
	var o statusOptions
	cmd := &cobra.Command{
		Use:               "status [STAGE] [-n PROJECT | -A] [-o table|wide|json|yaml] [-w]",
		Short:             "Show the Stages' latch cycles, Applications and pauses",
		Long:              statusHelp,
		ValidArgsFunction: kube.completeStages,
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), kube, args, cmd.OutOrStdout())
		},
	}
	cmd.Flags().BoolVarP(&o.all, "all-namespaces", "A", false, "all projects")
	cmd.Flags().StringVarP(&o.output, "output", "o", "table", "table, wide (the table and each AnalysisRun), json or yaml")
	cmd.Flags().BoolVarP(&o.watch, "watch", "w", false, "keep watching, and show the Stages again on every change")
	_ = cmd.RegisterFlagCompletionFunc("output", fixedCompletions(outputs...))
	return cmd
}

func (o *statusOptions) run(ctx context.Context, kube *kubeFlags, only []string, out io.Writer) error {
	if len(only) > 1 || (o.all && len(only) == 1) {
		return usageErrorf("status takes at most one Stage, and none with -A")
	}
	if !slices.Contains(outputs, o.output) {
		return usageErrorf("unknown output %q: use table, wide, json or yaml", o.output)
	}
	client, ns, err := kube.client()
	if err != nil {
		return err
	}
	if o.all {
		ns = metav1.NamespaceAll
	}
	if o.watch {
		return o.watchStatus(ctx, client, ns, only, out)
	}
	rows, err := collect(ctx, client, ns, only)
	if err != nil {
		return err
	}
	return render(out, rows, o.output, o.all, time.Now())
}

// render writes rows as a table, or as JSON or YAML.
func render(out io.Writer, rows []StageStatus, output string, withProject bool, now time.Time) error {
	switch output {
	case "json":
		b, err := json.MarshalIndent(rows, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(out, string(b))
		return err
	case "yaml":
		b, err := yaml.Marshal(rows)
		if err != nil {
			return err
		}
		_, err = out.Write(b)
		return err
	}
	return printTable(out, rows, withProject, output == "wide", now)
}

func collect(ctx context.Context, client dynamic.Interface, ns string, only []string) ([]StageStatus, error) {
	stages := client.Resource(kargo.StagesResource).Namespace(ns)
	var items []*unstructured.Unstructured
	if len(only) == 1 {
		u, err := stages.Get(ctx, only[0], metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("no such Stage %s in project %s", only[0], ns)
		}
		if err != nil {
			return nil, err
		}
		items = []*unstructured.Unstructured{u}
	} else {
		l, err := stages.List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		for i := range l.Items {
			items = append(items, &l.Items[i])
		}
	}
	pauses, err := listPauses(ctx, client, ns)
	if err != nil {
		return nil, err
	}
	return rows(items, pauses), nil
}

// rows are the rows of the Stages, sorted by project and name.
func rows(stages []*unstructured.Unstructured, pauses []v1alpha1.StagePause) []StageStatus {
	out := make([]StageStatus, 0, len(stages))
	for _, u := range stages {
		out = append(out, row(u, pauses))
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Project != out[j].Project {
			return out[i].Project < out[j].Project
		}
		return out[i].Stage < out[j].Stage
	})
	return out
}

func listPauses(ctx context.Context, client dynamic.Interface, ns string) ([]v1alpha1.StagePause, error) {
	l, err := client.Resource(v1alpha1.StagePausesResource).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	items := make([]*unstructured.Unstructured, len(l.Items))
	for i := range l.Items {
		items[i] = &l.Items[i]
	}
	return pausesOf(items), nil
}

// pausesOf reads StagePauses; one that does not read as a StagePause covers
// nothing, as for the gate and the operator.
func pausesOf(items []*unstructured.Unstructured) []v1alpha1.StagePause {
	out := make([]v1alpha1.StagePause, 0, len(items))
	for _, u := range items {
		var p v1alpha1.StagePause
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

func row(u *unstructured.Unstructured, pauses []v1alpha1.StagePause) StageStatus {
	r := StageStatus{Project: u.GetNamespace(), Stage: u.GetName(), Phase: "-"}
	if rec, err := latch.Decode(u.GetAnnotations()[api.StateAnnotation]); err != nil {
		r.Phase = "invalid record"
	} else if !rec.IsZero() {
		r.Phase, r.Record, r.LatchedAt = string(rec.Phase), &rec, rec.LatchedAt
		if rec.Failure != nil {
			r.Reason = string(rec.Failure.Reason)
		}
		r.Since = phaseSince(rec)
	}
	st := kargo.StatusFromUnstructured(u)
	if st != nil {
		var seen map[string]time.Time
		if r.Record != nil {
			seen = r.Record.AppsHealthy
		}
		r.Apps = appStatuses(st.Apps, seen)
		r.Freight = st.FreightNames
		r.Health = st.Health
		r.MarkedVerified = markedVerified(st.FreightNames, r.Record)
		r.KargoHolds = kargoHolds(st.Holds)
	}
	r.Analysis = cycleAnalysis(u, r.Record, st)
	var earliest *time.Time
	for _, p := range covering(u.GetNamespace(), u.GetName(), pauses) {
		if !r.Paused {
			r.Reason = p.EffectiveReason()
		}
		r.Paused = true
		r.Pauses = append(r.Pauses, p.Name)
		if t := p.CreationTimestamp.Time; earliest == nil || t.Before(*earliest) {
			earliest = &t
		}
	}
	if r.Paused {
		r.Since = earliest
	}
	return r
}

// covering are the pauses that cover the Stage ns/stage now. A pause being
// deleted no longer does: the gate ignores it, and the operator holds it
// only until the record shows the resume.
func covering(ns, stage string, pauses []v1alpha1.StagePause) []v1alpha1.StagePause {
	var out []v1alpha1.StagePause
	for _, p := range pauses {
		if p.Namespace == ns && p.DeletionTimestamp == nil && p.Covers(stage) {
			out = append(out, p)
		}
	}
	// In name order, as the API server lists them, whatever the order of
	// a watch's cache.
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// tableRow writes one row of a status table: project first, only when
// the table spans projects.
func tableRow(w io.Writer, withProject bool, project string, cells ...string) {
	if withProject {
		cells = append([]string{project}, cells...)
	}
	fmt.Fprintln(w, strings.Join(cells, "\t"))
}

// phaseSince is when the Stage entered its current phase.
func phaseSince(r latch.Record) *time.Time {
	switch r.Phase {
	case latch.PhaseFailed:
		return &r.Failure.At
	case latch.PhaseDegraded:
		return r.DegradedSince
	case latch.PhaseLatched:
		return r.LatchedAt
	case latch.PhasePromoted:
		return r.PromotedAt
	}
	return nil
}

// printTable writes the rows as a table; wide adds the AnalysisRun of each
// Stage's current cycle.
func printTable(out io.Writer, rows []StageStatus, withProject, wide bool, now time.Time) error {
	w := tabwriter.NewWriter(out, 0, 4, 3, ' ', 0)
	heading := []string{"STAGE", "PHASE", "APPS", "PAUSED", "REASON", "PAUSES", "HELD", "SINCE", "LATCHED", "ANALYSIS", "VERIFIED"}
	if wide {
		heading = append(heading, "ANALYSISRUN")
	}
	tableRow(w, withProject, "PROJECT", heading...)
	for _, r := range rows {
		paused := "no"
		if r.Paused {
			paused = "yes"
		}
		cells := []string{r.Stage, r.Phase, appsCell(r), paused, dash(r.Reason), dash(strings.Join(r.Pauses, ",")),
			heldCell(r), age(r.Since, now), age(r.LatchedAt, now), analysisCell(r, now), verifiedCell(r)}
		if wide {
			cells = append(cells, runCell(r))
		}
		tableRow(w, withProject, r.Project, cells...)
	}
	if len(rows) == 0 {
		fmt.Fprintln(w, "(no Stages)")
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return printHolds(out, rows, withProject, now)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func age(t *time.Time, now time.Time) string {
	if t == nil {
		return "-"
	}
	return duration.HumanDuration(now.Sub(*t)) + " ago"
}
