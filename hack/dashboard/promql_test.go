package main

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/promql/parser"
)

// grafanaVariables stand in for Grafana's interval variables, which the
// PromQL parser cannot read where a duration goes. The project variable may
// stay: it is only ever inside a regular expression's string.
var grafanaVariables = strings.NewReplacer(
	"$__rate_interval", "1m",
	"$__interval", "1m",
	"$__range", "6h",
)

// labelValues is the project variable's query: Grafana's label_values, not
// PromQL, around a selector.
var labelValues = regexp.MustCompile(`^label_values\((.+), *([a-zA-Z_][a-zA-Z0-9_]*)\)$`)

// histogramSeries are the series a histogram family is scraped as; the
// bucket series alone adds the le label.
var histogramSeries = []string{"_bucket", "_sum", "_count"}

// TestQueriesSelectExportedMetrics parses every query of the dashboard
// with Prometheus's own parser (the default one: no experimental function)
// and checks each selector against the operator's metric families: a name
// the operator exports, label matchers on labels the family has, and phase
// values the operator knows.
func TestQueriesSelectExportedMetrics(t *testing.T) {
	d := shipped(t)
	f := operatorFacts(t)
	families := map[string][]string{} // series name -> labels
	for _, fam := range f.Families {
		families[fam.Name] = fam.Labels
		if fam.Type == "histogram" {
			for _, suffix := range histogramSeries {
				families[fam.Name+suffix] = fam.Labels
			}
			families[fam.Name+"_bucket"] = append(fam.Labels[:len(fam.Labels):len(fam.Labels)], "le")
		}
	}
	check := func(where, expr string) {
		t.Helper()
		selectors, err := parseSelectors(expr)
		if err != nil {
			t.Errorf("%s: %v\n%s", where, err, expr)
			return
		}
		if len(selectors) == 0 {
			t.Errorf("%s selects no metric: %s", where, oneLine(expr))
		}
		for _, vs := range selectors {
			known, ok := families[vs.Name]
			if !ok {
				t.Errorf("%s selects %q, which the operator does not export: %s", where, vs.Name, oneLine(expr))
				continue
			}
			for _, m := range vs.LabelMatchers {
				switch {
				case m.Name == model.MetricNameLabel:
				case !slices.Contains(known, m.Name):
					t.Errorf("%s matches label %q of %s, which has %v", where, m.Name, vs.Name, known)
				case m.Name == "phase":
					for _, value := range strings.Split(m.Value, "|") {
						if !slices.Contains(f.Phases, value) {
							t.Errorf("%s matches phase %q, not one of %v", where, value, f.Phases)
						}
					}
				}
			}
		}
	}

	for _, q := range queries(t, d) {
		check(q.where, q.query.Expr)
	}
	checkedVariable := false
	for _, v := range d.Templating.List {
		if v.Name != "project" || v.Query == nil {
			continue
		}
		m := labelValues.FindStringSubmatch(deref(v.Query.String))
		if m == nil {
			t.Errorf("variable project: query %q, want label_values(selector, project)", deref(v.Query.String))
			continue
		}
		check("variable project", m[1])
		checkedVariable = true
	}
	if !checkedVariable {
		t.Error("no project variable query was checked")
	}
}

// TestSelectorCheckCatchesMistakes: the check above finds a misspelled
// name, a made-up label and an unknown phase.
func TestSelectorCheckCatchesMistakes(t *testing.T) {
	selectors, err := parseSelectors(`sum(rate(kargo_latch_pauses_totl{projekt="a"}[$__rate_interval])) + kargo_latch_stage_phase{phase="Sleeping"}`)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, vs := range selectors {
		got = append(got, vs.String())
	}
	want := []string{`kargo_latch_pauses_totl{projekt="a"}`, `kargo_latch_stage_phase{phase="Sleeping"}`}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("selectors %v, want %v", got, want)
	}
	if _, err := parseSelectors(`rate(kargo_latch_pauses_total[$__unknown])`); err == nil {
		t.Error("an unknown Grafana variable in a duration parsed")
	}
}

// parseSelectors parses a Grafana query and returns its vector selectors
// (those of range selectors and subqueries included).
func parseSelectors(expr string) ([]*parser.VectorSelector, error) {
	ast, err := parser.NewParser(parser.Options{}).ParseExpr(grafanaVariables.Replace(expr))
	if err != nil {
		return nil, err
	}
	var out []*parser.VectorSelector
	parser.Inspect(ast, func(node parser.Node, _ []parser.Node) error {
		if vs, ok := node.(*parser.VectorSelector); ok {
			out = append(out, vs)
		}
		return nil
	})
	return out, nil
}
