package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/controller"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// StageStatus is one row of `status`, and its JSON/YAML form.
type StageStatus struct {
	Project   string     `json:"project"`
	Stage     string     `json:"stage"`
	Phase     string     `json:"phase"`
	Paused    bool       `json:"paused"`
	Reason    string     `json:"reason,omitempty"`
	Pauses    []string   `json:"pauses,omitempty"`
	Since     *time.Time `json:"since,omitempty"`
	LatchedAt *time.Time `json:"latchedAt,omitempty"`
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
	MarkedVerified bool          `json:"markedVerified"`
	Record         *latch.Record `json:"record,omitempty"`
}

// statusHelp is `status -h`: what the columns mean.
const statusHelp = `Usage:
  kargo-latch status [STAGE] [-n PROJECT | -A] [-o table|json|yaml]

Shows each Stage's latch cycle: its phase, how far its Argo CD Applications
have got towards the latch, whether its Freight was marked verified, and the
StagePauses that cover it.

Columns:
  PHASE     Idle, Promoted (waiting for the latch), Latched, Degraded, Failed.
  APPS      N/M: N of the M Applications in the Stage's health output were
            seen Healthy and Synced in this cycle, each at its own moment; the
            cycle latches when all M were (or when the Stage is Healthy).
            N alone: the Stage lists no Application now; N were seen Healthy.
            >100: too many Applications; only the Stage's health counts.
            -: no per-Application data; only the Stage's health counts.
  PAUSED    yes while a StagePause covers the Stage.
  REASON    the pause's reason, else the failure's.
  PAUSES    the StagePauses that cover the Stage.
  SINCE     when the Stage entered its phase, or was paused.
  LATCHED   when the cycle latched.
  VERIFIED  marked: kargo-latch marked the current Freight verified in this
            Stage (or found it so), so downstream Stages can receive it.
            -: not marked by kargo-latch: mark-verified is off, the cycle has
            not latched, or the mark waits (a pause, a verification that has
            not succeeded, a missing right). Kargo may have verified it itself.

-o json and -o yaml add the current Freight, each Application with the time
it was first seen Healthy in this cycle (seenHealthyAt), and the latch record.

Flags: --kubeconfig PATH, --context NAME.
`

func status(ctx context.Context, args []string, out io.Writer) error {
	c := newFlags("status")
	var all bool
	var output string
	c.fs.BoolVar(&all, "A", false, "all projects")
	c.fs.BoolVar(&all, "all-namespaces", false, "all projects")
	c.fs.StringVar(&output, "o", "table", "table, json or yaml")
	c.fs.StringVar(&output, "output", "table", "table, json or yaml")
	pos, err := c.parse(args)
	if errors.Is(err, flag.ErrHelp) {
		_, err = fmt.Fprint(out, statusHelp)
		return err
	}
	if err != nil {
		return err
	}
	if len(pos) > 1 || (all && len(pos) == 1) {
		return fmt.Errorf("status takes at most one Stage, and none with -A")
	}
	if output != "table" && output != "json" && output != "yaml" {
		return fmt.Errorf("unknown output %q: use table, json or yaml", output)
	}
	client, ns, err := c.client()
	if err != nil {
		return err
	}
	if all {
		ns = metav1.NamespaceAll
	}
	rows, err := collect(ctx, client, ns, pos)
	if err != nil {
		return err
	}
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
	return printTable(out, rows, all, time.Now())
}

func collect(ctx context.Context, client dynamic.Interface, ns string, only []string) ([]StageStatus, error) {
	stages := client.Resource(kargo.StagesResource).Namespace(ns)
	var items []unstructured.Unstructured
	if len(only) == 1 {
		u, err := stages.Get(ctx, only[0], metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("no such Stage %s in project %s", only[0], ns)
		}
		if err != nil {
			return nil, err
		}
		items = []unstructured.Unstructured{*u}
	} else {
		l, err := stages.List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		items = l.Items
	}
	pauses, err := listPauses(ctx, client, ns)
	if err != nil {
		return nil, err
	}
	rows := make([]StageStatus, 0, len(items))
	for i := range items {
		rows = append(rows, row(&items[i], pauses))
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Project != rows[j].Project {
			return rows[i].Project < rows[j].Project
		}
		return rows[i].Stage < rows[j].Stage
	})
	return rows, nil
}

func listPauses(ctx context.Context, client dynamic.Interface, ns string) ([]v1alpha1.StagePause, error) {
	l, err := client.Resource(v1alpha1.StagePausesResource).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	out := make([]v1alpha1.StagePause, 0, len(l.Items))
	for _, u := range l.Items {
		var p v1alpha1.StagePause
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &p); err == nil {
			out = append(out, p)
		}
	}
	return out, nil
}

func row(u *unstructured.Unstructured, pauses []v1alpha1.StagePause) StageStatus {
	r := StageStatus{Project: u.GetNamespace(), Stage: u.GetName(), Phase: "-"}
	if rec, err := latch.Decode(u.GetAnnotations()[controller.StateAnnotation]); err != nil {
		r.Phase = "invalid record"
	} else if !rec.IsZero() {
		r.Phase, r.Record, r.LatchedAt = string(rec.Phase), &rec, rec.LatchedAt
		if rec.Failure != nil {
			r.Reason = string(rec.Failure.Reason)
		}
		r.Since = phaseSince(rec)
	}
	if st := kargo.StatusFromUnstructured(u); st != nil {
		var seen map[string]time.Time
		if r.Record != nil {
			seen = r.Record.AppsHealthy
		}
		r.Apps = appStatuses(st.Apps, seen)
		r.Freight = st.FreightNames
		r.MarkedVerified = markedVerified(st.FreightNames, r.Record)
	}
	var earliest *time.Time
	for _, p := range pauses {
		if p.Namespace != u.GetNamespace() || p.DeletionTimestamp != nil || !p.Covers(u.GetName()) {
			continue
		}
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

func printTable(out io.Writer, rows []StageStatus, withProject bool, now time.Time) error {
	w := tabwriter.NewWriter(out, 0, 4, 3, ' ', 0)
	header := "STAGE\tPHASE\tAPPS\tPAUSED\tREASON\tPAUSES\tSINCE\tLATCHED\tVERIFIED"
	if withProject {
		header = "PROJECT\t" + header
	}
	fmt.Fprintln(w, header)
	for _, r := range rows {
		paused := "no"
		if r.Paused {
			paused = "yes"
		}
		cells := []string{r.Stage, r.Phase, appsCell(r), paused, dash(r.Reason), dash(strings.Join(r.Pauses, ",")),
			age(r.Since, now), age(r.LatchedAt, now), verifiedCell(r)}
		if withProject {
			cells = append([]string{r.Project}, cells...)
		}
		fmt.Fprintln(w, strings.Join(cells, "\t"))
	}
	if len(rows) == 0 {
		fmt.Fprintln(w, "(no Stages)")
	}
	return w.Flush()
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
