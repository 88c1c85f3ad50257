package windows

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMatches(t *testing.T) {
	prodEU := StageRef{Project: "shop", Name: "prod-eu", Labels: map[string]string{"env": "prod", "region": "eu"}, ProjectLabels: map[string]string{"tier": "gold"}}
	prodUS := StageRef{Project: "shop", Name: "prod-us.east", Labels: map[string]string{"env": "prod", "region": "us"}}
	preprod := StageRef{Project: "shop", Name: "preprod", Labels: map[string]string{"env": "staging"}}
	other := StageRef{Project: "blog", Name: "prod-eu", Labels: map[string]string{"env": "prod"}, ProjectLabels: map[string]string{"tier": "bronze"}}
	stages := []StageRef{prodEU, prodUS, preprod, other}
	labelsIn := func(key string, values ...string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: key, Operator: metav1.LabelSelectorOpIn, Values: values}}}
	}
	tests := []struct {
		name        string
		clusterWide bool
		stage       *Selector
		project     *Selector
		want        []StageRef
	}{
		{name: "no selector: every Stage in scope", want: stages},
		{name: "exact name", stage: &Selector{Name: "prod-eu"}, want: []StageRef{prodEU, other}},
		{name: "exact name is exact", stage: &Selector{Name: "prod"}},
		{name: "glob matches the whole name, dots included", stage: &Selector{Name: "glob:prod-*"}, want: []StageRef{prodEU, prodUS, other}},
		{name: "glob alternatives (doublestar)", stage: &Selector{Name: "glob:{preprod,prod-us*}"}, want: []StageRef{prodUS, preprod}},
		{name: "glob is anchored", stage: &Selector{Name: "glob:prod"}},
		{name: "regex is not anchored, as in Kargo", stage: &Selector{Name: "regex:prod"}, want: stages},
		{name: "anchored regex", stage: &Selector{Name: "regex:^prod-"}, want: []StageRef{prodEU, prodUS, other}},
		{name: "regexp: prefix too", stage: &Selector{Name: "regexp:-(eu|us)"}, want: []StageRef{prodEU, prodUS, other}},
		{name: "matchLabels", stage: &Selector{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"env": "prod"}}}, want: []StageRef{prodEU, prodUS, other}},
		{name: "matchExpressions", stage: &Selector{LabelSelector: labelsIn("region", "us", "ap")}, want: []StageRef{prodUS}},
		{name: "name ANDed with labels", stage: &Selector{Name: "glob:prod-*", LabelSelector: labelsIn("region", "eu")}, want: []StageRef{prodEU}},
		{name: "empty label selector selects everything", stage: &Selector{LabelSelector: &metav1.LabelSelector{}}, want: stages},
		{name: "cluster window, no projectSelector: every Project", clusterWide: true, stage: &Selector{Name: "prod-eu"}, want: []StageRef{prodEU, other}},
		{name: "cluster window, Project by name", clusterWide: true, project: &Selector{Name: "blog"}, want: []StageRef{other}},
		{name: "cluster window, Project by glob", clusterWide: true, project: &Selector{Name: "glob:sh*"}, want: []StageRef{prodEU, prodUS, preprod}},
		{name: "cluster window, Project by labels", clusterWide: true, project: &Selector{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}}, want: []StageRef{prodEU}},
		{name: "cluster window, Project and Stage ANDed", clusterWide: true, project: &Selector{Name: "shop"}, stage: &Selector{Name: "regex:^pr"}, want: []StageRef{prodEU, prodUS, preprod}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := Window{Name: "w", Kind: KindDeny, DTStart: "20260101T000000Z", DTEnd: "20260102T000000Z", StageSelector: tt.stage, ProjectSelector: tt.project}
			var c *Compiled
			if tt.clusterWide {
				c = mustCompileClusterWide(t, w)
			} else {
				c = mustCompile(t, w)
			}
			var got []StageRef
			for _, s := range stages {
				if c.Matches(s) {
					got = append(got, s)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("selected Stages (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMatchingWindows(t *testing.T) {
	eu := mustCompile(t, Window{Name: "eu", Kind: KindDeny, DTStart: "20260101T000000Z", DTEnd: "20260102T000000Z", StageSelector: &Selector{Name: "glob:*-eu"}})
	all := mustCompile(t, Window{Name: "all", Kind: KindAllow, DTStart: "20260101T000000Z", DTEnd: "20260102T000000Z"})
	us := mustCompile(t, Window{Name: "us", Kind: KindDeny, DTStart: "20260101T000000Z", DTEnd: "20260102T000000Z", StageSelector: &Selector{Name: "glob:*-us"}})
	got := MatchingWindows([]*Compiled{eu, all, us}, StageRef{Project: "p", Name: "prod-eu"})
	if diff := cmp.Diff([]string{"eu", "all"}, names(got, []bool{true, true})); diff != "" {
		t.Errorf("matching windows (-want +got):\n%s", diff)
	}
}

func TestSelectorErrors(t *testing.T) {
	tests := []struct {
		name        string
		clusterWide bool
		stage       *Selector
		project     *Selector
		wantFields  []string
	}{
		{name: "bad regex", stage: &Selector{Name: "regex:prod-("}, wantFields: []string{"stageSelector.name"}},
		{name: "bad glob", stage: &Selector{Name: "glob:prod-[a"}, wantFields: []string{"stageSelector.name"}},
		{name: "unknown prefix", stage: &Selector{Name: "Glob:prod-*"}, wantFields: []string{"stageSelector.name"}},
		{name: "bad operator", stage: &Selector{LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: "Like", Values: []string{"prod"}}}}}, wantFields: []string{"stageSelector.matchExpressions"}},
		{name: "In without values", stage: &Selector{LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "env", Operator: metav1.LabelSelectorOpIn}}}}, wantFields: []string{"stageSelector.matchExpressions"}},
		{name: "bad label key", stage: &Selector{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"not a key": "x"}}}, wantFields: []string{"stageSelector.matchExpressions"}},
		{name: "bad project regex", clusterWide: true, project: &Selector{Name: "regex:*"}, wantFields: []string{"projectSelector.name"}},
		{name: "projectSelector on a ProjectConfig window", project: &Selector{Name: "shop"}, wantFields: []string{"projectSelector"}},
		{name: "both at once", clusterWide: true, stage: &Selector{Name: "regex:("}, project: &Selector{Name: "glob:["}, wantFields: []string{"stageSelector.name", "projectSelector.name"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := Window{Name: "w", Kind: KindDeny, DTStart: "20260101T000000Z", DTEnd: "20260102T000000Z", StageSelector: tt.stage, ProjectSelector: tt.project}
			compile := Compile
			if tt.clusterWide {
				compile = CompileClusterWide
			}
			c, err := compile(w)
			if err == nil {
				t.Fatalf("compiled %+v, want an error", c.Window)
			}
			if diff := cmp.Diff(tt.wantFields, fields(err)); diff != "" {
				t.Errorf("fields at fault (-want +got):\n%s\nerror: %v", diff, err)
			}
		})
	}
}
