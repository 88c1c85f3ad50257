package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	sdkprometheus "github.com/grafana/grafana-foundation-sdk/go/prometheus"
)

// TestShippedDashboardsAreCurrent fails when a shipped copy differs from
// what the generator makes: run `make generate`. The copies are then the
// same bytes too.
func TestShippedDashboardsAreCurrent(t *testing.T) {
	want, err := render()
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range targets {
		got, err := os.ReadFile(filepath.Join(root, target))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: run `make generate`", target)
		}
	}
}

// shipped is the dashboard as it ships, read as Grafana's dashboard model,
// strictly: it must write back as the same JSON, so a field the model does
// not know, or a value of the wrong type, fails. (The SDK's own
// UnmarshalJSONStrict cannot serve: in this version it drops every panel
// and query, its empty list of errors taken for an error.)
func shipped(t *testing.T) Dashboard {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(root, targets[0]))
	if err != nil {
		t.Fatal(err)
	}
	// The panel and query types of Grafana's own plugins.
	plugins.RegisterDefaultPlugins()
	var d Dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s is no Grafana dashboard: %v", targets[0], err)
	}
	again, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	var read, written any
	if err := json.Unmarshal(raw, &read); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(again, &written); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(read, written); diff != "" {
		t.Fatalf("%s does not read as Grafana's dashboard model (-file +model):\n%s", targets[0], diff)
	}
	return d
}

// panelQuery is one query of the dashboard, with where it is.
type panelQuery struct {
	where string // panel title and refId, or the variable
	query *sdkprometheus.Dataquery
}

// queries are every panel's queries; a panel whose query is not a
// Prometheus one fails the test.
func queries(t *testing.T, d Dashboard) []panelQuery {
	t.Helper()
	var out []panelQuery
	for _, p := range d.Panels {
		if p.Panel == nil {
			continue
		}
		for _, target := range p.Panel.Targets {
			q, ok := target.(*sdkprometheus.Dataquery)
			if !ok {
				t.Fatalf("panel %q: query %T, want a Prometheus one", deref(p.Panel.Title), target)
			}
			out = append(out, panelQuery{where: deref(p.Panel.Title) + " " + deref(q.RefId), query: q})
		}
	}
	if len(out) == 0 {
		t.Fatal("the dashboard has no queries")
	}
	return out
}

func TestDashboardIsComplete(t *testing.T) {
	d := shipped(t)
	if deref(d.Uid) != uid || deref(d.Title) == "" || d.SchemaVersion == 0 {
		t.Errorf("uid %q, title %q, schemaVersion %d; want uid %q, a title and a schemaVersion", deref(d.Uid), deref(d.Title), d.SchemaVersion, uid)
	}
	variables := map[string]dashboard.VariableModel{}
	for _, v := range d.Templating.List {
		variables[v.Name] = v
	}
	if v := variables["datasource"]; v.Type != dashboard.VariableTypeDatasource || v.Query == nil || deref(v.Query.String) != "prometheus" {
		t.Errorf("variable datasource %+v, want a Prometheus datasource variable", v)
	}
	if v := variables["project"]; v.Type != dashboard.VariableTypeQuery || !deref(v.Multi) || !deref(v.IncludeAll) {
		t.Errorf("variable project %+v, want a query variable, multi, with All", v)
	}

	var grid [][24]string // which panel takes each cell
	for _, p := range d.Panels {
		if p.Panel == nil {
			t.Errorf("a row panel: the layout has none")
			continue
		}
		title := deref(p.Panel.Title)
		if p.Panel.Type == "" || title == "" || deref(p.Panel.Description) == "" || len(p.Panel.Targets) == 0 {
			t.Errorf("panel %q of type %q with %d queries: want a type, a title, a description and queries", title, p.Panel.Type, len(p.Panel.Targets))
		}
		if ds := p.Panel.Datasource; ds == nil || deref(ds.Uid) != "${datasource}" {
			t.Errorf("panel %q does not use the datasource variable", title)
		}
		pos := p.Panel.GridPos
		if pos == nil || pos.W == 0 || pos.H == 0 || pos.X+pos.W > 24 {
			t.Errorf("panel %q at %+v: want a place in the 24 columns", title, pos)
			continue
		}
		for y := pos.Y; y < pos.Y+pos.H; y++ {
			for len(grid) <= int(y) {
				grid = append(grid, [24]string{})
			}
			for x := pos.X; x < pos.X+pos.W; x++ {
				if other := grid[y][x]; other != "" {
					t.Errorf("panels %q and %q overlap at %d,%d", other, title, x, y)
				}
				grid[y][x] = title
			}
		}
	}
	refIDs := map[string]bool{}
	for _, q := range queries(t, d) {
		if q.query.Expr == "" || deref(q.query.RefId) == "" || refIDs[q.where] {
			t.Errorf("query %s: want an expression and a refId of its own", q.where)
		}
		refIDs[q.where] = true
		if ds := q.query.Datasource; ds == nil || deref(ds.Uid) != "${datasource}" {
			t.Errorf("query %s does not use the datasource variable", q.where)
		}
	}
}

// facts is what hack/metricfacts tells of the operator's metrics.
type facts struct {
	Families []struct {
		Name   string   `json:"name"`
		Type   string   `json:"type"`
		Labels []string `json:"labels"`
	} `json:"families"`
	Phases []string `json:"phases"`
}

// operatorFacts runs hack/metricfacts in the operator's module, which this
// one cannot import.
func operatorFacts(t *testing.T) facts {
	t.Helper()
	cmd := exec.Command("go", "run", "./hack/metricfacts")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go run ./hack/metricfacts: %v\n%s", err, stderr.String())
	}
	var f facts
	if err := json.Unmarshal(out, &f); err != nil {
		t.Fatalf("hack/metricfacts printed %q: %v", out, err)
	}
	if len(f.Families) == 0 || len(f.Phases) == 0 {
		t.Fatalf("hack/metricfacts printed no families or no phases: %s", out)
	}
	return f
}

func TestPhasesAreTheOperators(t *testing.T) {
	var names []string
	for _, p := range phases {
		names = append(names, p.name)
	}
	if want := operatorFacts(t).Phases; !slices.Equal(names, want) {
		t.Errorf("the dashboard's phases %v, the operator's %v: the phase timeline maps codes to these names in order", names, want)
	}
}

func deref[T any](p *T) T {
	var zero T
	if p == nil {
		return zero
	}
	return *p
}

// oneLine is an expression as an error message shows it.
func oneLine(expr string) string { return strings.Join(strings.Fields(expr), " ") }
