package kargo

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/kargo-latch/kargo-latch/latch"
)

func TestAppsFromOutput(t *testing.T) {
	cases := map[string]struct {
		output string
		want   []latch.App
	}{
		"Kargo's argocd-update output, as real Kargo writes it": {
			output: `[{"applicationStatuses": [
				{"Name": "test-a", "Namespace": "argocd", "health": {"status": "Progressing"},
				 "sync": {"status": "Synced", "revision": "v2"},
				 "operationState": {"phase": "Succeeded", "finishedAt": "2026-11-30T07:58:16Z"}},
				{"Name": "test-b", "Namespace": "argocd", "health": {"status": "Healthy"}, "sync": {"status": "Synced", "revision": "v2"}}]}]`,
			want: []latch.App{
				{Name: "test-a", Namespace: "argocd", Health: "Progressing", Sync: "Synced"},
				{Name: "test-b", Namespace: "argocd", Health: "Healthy", Sync: "Synced"},
			},
		},
		"two health checks' outputs are read together": {
			output: `[{"applicationStatuses": [{"Name": "a", "Namespace": "x", "health": {"status": "Healthy"}, "sync": {"status": "Synced"}}]},
			          {"applicationStatuses": [{"Name": "b", "Namespace": "y", "health": {"status": "Degraded"}, "sync": {"status": "OutOfSync"}}]}]`,
			want: []latch.App{{Name: "a", Namespace: "x", Health: "Healthy", Sync: "Synced"}, {Name: "b", Namespace: "y", Health: "Degraded", Sync: "OutOfSync"}},
		},
		"lowercase keys (a future Kargo with JSON tags) read the same": {
			output: `[{"applicationStatuses": [{"name": "a", "namespace": "x", "health": {"status": "Healthy"}, "sync": {"status": "Synced"}}]}]`,
			want:   []latch.App{{Name: "a", Namespace: "x", Health: "Healthy", Sync: "Synced"}},
		},
		"missing health and sync read as empty": {
			output: `[{"applicationStatuses": [{"Name": "a"}]}]`,
			want:   []latch.App{{Name: "a"}},
		},
		"no output":                     {output: `null`},
		"an empty array":                {output: `[]`},
		"an object, not an array":       {output: `{"applicationStatuses": [{"Name": "a"}]}`},
		"another checker's output":      {output: `[{"deployments": [{"name": "a", "ready": true}]}]`},
		"one known and one other check": {output: `[{"applicationStatuses": [{"Name": "a"}]}, {"other": 1}]`},
		"an entry without a name":       {output: `[{"applicationStatuses": [{"Namespace": "x", "health": {"status": "Healthy"}}]}]`},
		"entries of the wrong type":     {output: `[{"applicationStatuses": ["a", "b"]}]`},
		"a string":                      {output: `"Healthy"`},
		"numbers where strings belong":  {output: `[{"applicationStatuses": [{"Name": 7, "health": {"status": 1}}]}]`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var output any
			if err := json.Unmarshal([]byte(tc.output), &output); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, appsFromOutput(output)); diff != "" {
				t.Errorf("appsFromOutput (-want +got):\n%s", diff)
			}
		})
	}
}

func TestAppsFromOutputKeepsOneMoreThanTheLatchBound(t *testing.T) {
	var entries []string
	for i := range 500 {
		entries = append(entries, fmt.Sprintf(`{"Name": "app-%d", "Namespace": "argocd", "health": {"status": "Healthy"}, "sync": {"status": "Synced"}}`, i))
	}
	var output any
	if err := json.Unmarshal([]byte(`[{"applicationStatuses": [`+strings.Join(entries, ",")+`]}]`), &output); err != nil {
		t.Fatal(err)
	}
	if got := len(appsFromOutput(output)); got != maxApps {
		t.Errorf("kept %d Apps, want %d", got, maxApps)
	}
}

// The mirror counts the health checks the last promotion left for Kargo
// and the entries of the health output, alike through the maps and the
// codec: Kargo writes no entry for a check that returned no output, so
// fewer entries than checks mean the Apps listed are not all it checks.
func TestMirrorCountsHealthChecksAndOutputs(t *testing.T) {
	const argoCD = `{"applicationStatuses": [{"Name": "a", "Namespace": "argocd", "health": {"status": "Healthy"}, "sync": {"status": "Synced"}}]}`
	const check = `{"uses": "argocd-update", "config": {"apps": [{"name": "a", "namespace": "argocd"}]}}`
	cases := map[string]struct {
		healthChecks, output string
		checks, outputs      int
	}{
		"one check, its output":             {healthChecks: `[` + check + `]`, output: `[` + argoCD + `]`, checks: 1, outputs: 1},
		"two checks, one output":            {healthChecks: `[` + check + `,` + check + `]`, output: `[` + argoCD + `]`, checks: 2, outputs: 1},
		"two checks, two outputs":           {healthChecks: `[` + check + `,` + check + `]`, output: `[` + argoCD + `,` + argoCD + `]`, checks: 2, outputs: 2},
		"no checks recorded":                {healthChecks: `null`, output: `[` + argoCD + `]`, outputs: 1},
		"checks and output of other shapes": {healthChecks: `[1, "x"]`, output: `[1, "x", {}]`, checks: 2, outputs: 3},
		"neither an array":                  {healthChecks: `{"uses": "x"}`, output: `"Healthy"`},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			doc := []byte(`{"metadata": {"name": "a"}, "status": {"lastPromotion": {"name": "p", "status": {"phase": "Succeeded", "healthChecks": ` +
				tc.healthChecks + `}}, "health": {"status": "Progressing", "output": ` + tc.output + `}}}`)
			maps, ok := viaMaps(doc)
			if !ok {
				t.Fatalf("bad test document:\n%s", doc)
			}
			if diff := cmp.Diff(maps, viaDocs(t, doc)); diff != "" {
				t.Errorf("the Stage codec reads otherwise than the maps (-maps +codec):\n%s", diff)
			}
			if got := maps.Status.LastPromotion.HealthChecks; got != tc.checks {
				t.Errorf("%d health checks, want %d", got, tc.checks)
			}
			if got := maps.Status.HealthOutputs; got != tc.outputs {
				t.Errorf("%d output entries, want %d", got, tc.outputs)
			}
		})
	}
}
