package cli

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

var now = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)

func ago(d time.Duration) *time.Time {
	t := now.Add(-d)
	return &t
}

// stage is a Stage as the API server returns it: Kargo's status (health
// output in the shape driver.AppsHealth writes, which is Kargo's), and
// kargo-latch's record in its annotation.
func stage(t *testing.T, health map[string]any, freight []string, rec latch.Record) *unstructured.Unstructured {
	t.Helper()
	items := map[string]any{}
	for i, f := range freight {
		items[fmt.Sprintf("Warehouse/w%d", i)] = map[string]any{"name": f, "origin": map[string]any{"kind": "Warehouse", "name": fmt.Sprintf("w%d", i)}}
	}
	status := map[string]any{"freightHistory": []any{map[string]any{"id": "abc", "items": items}}}
	if health != nil {
		status["health"] = health
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kargo.akuity.io/v1alpha1", "kind": "Stage",
		"metadata": map[string]any{"name": "test", "namespace": "project"},
		"status":   status,
	}}
	if !rec.IsZero() {
		u.SetAnnotations(map[string]string{api.StateAnnotation: rec.Encode()})
	}
	return u
}

// inCycle is a valid record of a cycle in phase, changed by edit.
func inCycle(phase latch.Phase, edit func(*latch.Record)) latch.Record {
	r := latch.Record{Phase: phase, PromotedAt: ago(10 * time.Minute)}
	if phase == latch.PhaseLatched {
		r.LatchedAt = ago(5 * time.Minute)
	}
	if edit != nil {
		edit(&r)
	}
	return r
}

func TestRowReadsAppsAndMark(t *testing.T) {
	frontAt := now.Add(-time.Minute)
	twoApps := driver.AppsHealth("Progressing",
		driver.App{Name: "front", Health: "Healthy"},
		driver.App{Name: "back", Health: "Progressing", Sync: "OutOfSync"})
	for name, c := range map[string]struct {
		health       map[string]any
		freight      []string
		rec          latch.Record
		wantApps     []AppStatus
		wantMarked   bool
		wantAppsCell string
	}{
		"one of two Apps seen Healthy": {
			health:  twoApps,
			freight: []string{"f1"},
			rec:     inCycle(latch.PhasePromoted, func(r *latch.Record) { r.AppsHealthy = map[string]time.Time{"argocd/front": frontAt} }),
			wantApps: []AppStatus{
				{Name: "front", Namespace: "argocd", Health: "Healthy", Sync: "Synced", SeenHealthyAt: &frontAt},
				{Name: "back", Namespace: "argocd", Health: "Progressing", Sync: "OutOfSync"},
			},
			wantAppsCell: "1/2",
		},
		"after the latch, which the Stage mirror forgets the Apps at": {
			health:  twoApps,
			freight: []string{"f1"},
			rec: inCycle(latch.PhaseLatched, func(r *latch.Record) {
				r.AppsHealthy = map[string]time.Time{"argocd/front": frontAt, "argocd/back": now}
			}),
			wantApps: []AppStatus{
				{Name: "front", Namespace: "argocd", Health: "Healthy", Sync: "Synced", SeenHealthyAt: &frontAt},
				{Name: "back", Namespace: "argocd", Health: "Progressing", Sync: "OutOfSync", SeenHealthyAt: &now},
			},
			wantAppsCell: "2/2",
		},
		"no record yet": {
			health:  twoApps,
			freight: []string{"f1"},
			wantApps: []AppStatus{
				{Name: "front", Namespace: "argocd", Health: "Healthy", Sync: "Synced"},
				{Name: "back", Namespace: "argocd", Health: "Progressing", Sync: "OutOfSync"},
			},
			wantAppsCell: "0/2",
		},
		"marked: every current Freight": {
			freight:      []string{"f1", "f2"},
			rec:          inCycle(latch.PhaseLatched, func(r *latch.Record) { r.Marked = []string{"f2", "f1"} }),
			wantMarked:   true,
			wantAppsCell: "-",
		},
		"not marked: one current Freight is not": {
			freight:      []string{"f1", "f2"},
			rec:          inCycle(latch.PhaseLatched, func(r *latch.Record) { r.Marked = []string{"f1"} }),
			wantAppsCell: "-",
		},
		"not marked: the record marked earlier Freight": {
			freight:      []string{"f2"},
			rec:          inCycle(latch.PhaseLatched, func(r *latch.Record) { r.Marked = []string{"f1"} }),
			wantAppsCell: "-",
		},
		"the health output is gone after the latch": {
			health:  map[string]any{"status": "Healthy"},
			freight: []string{"f1"},
			rec: inCycle(latch.PhaseLatched, func(r *latch.Record) {
				r.AppsHealthy = map[string]time.Time{"argocd/front": frontAt, "argocd/back": frontAt}
			}),
			wantAppsCell: "2",
		},
		"a health output of another shape": {
			health:       map[string]any{"status": "Progressing", "output": map[string]any{"checks": []any{"x"}}},
			freight:      []string{"f1"},
			rec:          inCycle(latch.PhasePromoted, nil),
			wantAppsCell: "-",
		},
	} {
		t.Run(name, func(t *testing.T) {
			r := row(stage(t, c.health, c.freight, c.rec), nil)
			if want := string(c.rec.Phase); !c.rec.IsZero() && r.Phase != want {
				t.Fatalf("phase %q, want %q: the test's record is not valid", r.Phase, want)
			}
			if diff := cmp.Diff(c.wantApps, r.Apps); diff != "" {
				t.Errorf("apps (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(c.freight, r.Freight); diff != "" {
				t.Errorf("freight (-want +got):\n%s", diff)
			}
			if r.MarkedVerified != c.wantMarked {
				t.Errorf("markedVerified = %v, want %v", r.MarkedVerified, c.wantMarked)
			}
			if got := appsCell(r); got != c.wantAppsCell {
				t.Errorf("APPS = %q, want %q", got, c.wantAppsCell)
			}
		})
	}
}

func TestAppsCellOverTheLimit(t *testing.T) {
	apps := make([]driver.App, latch.MaxApps+5)
	for i := range apps {
		apps[i] = driver.App{Name: fmt.Sprintf("app-%d", i), Health: "Healthy"}
	}
	r := row(stage(t, driver.AppsHealth("Healthy", apps...), []string{"f1"}, inCycle(latch.PhaseLatched, nil)), nil)
	if got, want := appsCell(r), ">100"; got != want {
		t.Errorf("APPS = %q, want %q", got, want)
	}
}

func TestPrintTable(t *testing.T) {
	seen := now.Add(-2 * time.Minute)
	rows := []StageStatus{
		{Project: "p", Stage: "flapping", Phase: "Promoted", Since: ago(5 * time.Minute),
			Apps:   []AppStatus{{Name: "a", SeenHealthyAt: &seen}, {Name: "b"}},
			Record: &latch.Record{Phase: latch.PhasePromoted}},
		{Project: "p", Stage: "marked", Phase: "Latched", Since: ago(time.Minute), LatchedAt: ago(time.Minute),
			Apps:           []AppStatus{{Name: "a", SeenHealthyAt: &seen}, {Name: "b", SeenHealthyAt: &seen}},
			MarkedVerified: true,
			Record:         &latch.Record{Phase: latch.PhaseLatched}},
		{Project: "q", Stage: "paused", Phase: "Latched", Paused: true, Reason: "Incident", Pauses: []string{"inc-1"},
			Since: ago(time.Hour), LatchedAt: ago(2 * time.Hour)},
		{Project: "q", Stage: "new", Phase: "-"},
	}
	want := `
PROJECT   STAGE      PHASE      APPS   PAUSED   REASON     PAUSES   HELD   SINCE     LATCHED    ANALYSIS   VERIFIED
p         flapping   Promoted   1/2    no       -          -        -      5m ago    -          -          -
p         marked     Latched    2/2    no       -          -        -      60s ago   60s ago    -          marked
q         paused     Latched    -      yes      Incident   inc-1    -      60m ago   120m ago   -          -
q         new        -          -      no       -          -        -      -         -          -          -
`
	var b bytes.Buffer
	if err := printTable(&b, rows, true, false, now); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(strings.TrimPrefix(want, "\n"), trimLines(b.String())); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
}

// trimLines drops the padding tabwriter leaves after the last column.
func trimLines(s string) string {
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n")
}

// A person rolled back during an incident: Kargo holds auto-promotion of
// the Stage from a Warehouse. The table names the Warehouse beside the
// pauses, and the lines below it say, per hold, its origin, Freight, actor,
// promotion and age, and how to release it; -o json carries them too.
func TestStatusShowsKargosHolds(t *testing.T) {
	u := stage(t, nil, []string{"f1"}, inCycle(latch.PhaseLatched, nil))
	u.Object["status"].(map[string]any)["effectiveAutoPromotionHolds"] = map[string]any{
		"Warehouse/images": map[string]any{"freightName": "f0", "origin": map[string]any{"kind": "Warehouse", "name": "images"},
			"promotionName": "test.01m.f0", "actor": "admin", "createdAt": ago(3 * time.Minute).Format(time.RFC3339)},
		"Warehouse/charts": map[string]any{"freightName": "c0", "origin": map[string]any{"kind": "Warehouse", "name": "charts"}},
	}
	// Kargo keeps a hold it no longer honours in autoPromotionHolds only.
	u.Object["status"].(map[string]any)["autoPromotionHolds"] = map[string]any{
		"Warehouse/old": map[string]any{"freightName": "o0", "origin": map[string]any{"kind": "Warehouse", "name": "old"}},
	}
	rows := rows([]*unstructured.Unstructured{u, stage(t, nil, []string{"f2"}, inCycle(latch.PhaseLatched, nil))}, nil)
	rows[1].Stage = "other"
	wantHolds := []KargoHold{
		{Origin: "Warehouse/charts", Freight: "c0"},
		{Origin: "Warehouse/images", Freight: "f0", Actor: "admin", Promotion: "test.01m.f0", Since: ago(3 * time.Minute)},
	}
	if diff := cmp.Diff(wantHolds, rows[0].KargoHolds); diff != "" {
		t.Errorf("holds (-want +got):\n%s", diff)
	}
	var b bytes.Buffer
	if err := printTable(&b, rows, false, false, now); err != nil {
		t.Fatal(err)
	}
	want := `
STAGE   PHASE     APPS   PAUSED   REASON   PAUSES   HELD            SINCE    LATCHED   ANALYSIS   VERIFIED
test    Latched   -      no       -        -        charts,images   5m ago   5m ago    -          -
other   Latched   -      no       -        -        -               5m ago   5m ago    -          -
Kargo's own auto-promotion holds (to release one, promote the Warehouse's current candidate Freight to the Stage, or resume auto-promotion in Kargo's UI):
STAGE   ORIGIN             FREIGHT   ACTOR   PROMOTION     SINCE
test    Warehouse/charts   c0        -       -             -
test    Warehouse/images   f0        admin   test.01m.f0   3m ago
`
	if diff := cmp.Diff(strings.TrimPrefix(want, "\n"), trimLines(b.String())); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
	b.Reset()
	if err := render(&b, rows[:1], "json", false, now); err != nil {
		t.Fatal(err)
	}
	if want := `"kargoHolds": [`; !strings.Contains(b.String(), want) || !strings.Contains(b.String(), `"actor": "admin"`) {
		t.Errorf("-o json has no holds:\n%s", b.String())
	}
}

func TestStatusHelp(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := Run(t.Context(), []string{"status", "-h"}, &out, &errOut); code != ExitOK {
		t.Fatalf("status -h: exit %d: %s", code, errOut.String())
	}
	for _, col := range []string{"APPS", "HELD", "ANALYSIS", "waiting for Kargo", "ANALYSISRUN", "VERIFIED", "seenHealthyAt", "kargoHolds"} {
		if !strings.Contains(out.String(), col) {
			t.Errorf("status -h does not explain %s:\n%s", col, out.String())
		}
	}
}
