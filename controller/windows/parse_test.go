package windows

import (
	"errors"
	"math"
	"testing"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// A ClusterConfig as a user writes it for Kargo Enterprise, decoded as the
// dynamic client decodes it.
const clusterConfigYAML = `
apiVersion: kargo.akuity.io/v1alpha1
kind: ClusterConfig
metadata:
  name: cluster
spec:
  promotionWindows:
  - name: weekend-freeze
    kind: Deny
    rrule: FREQ=WEEKLY;BYDAY=SA
    dtstart: TZID=Europe/Berlin:20260103T000000
    dtend: TZID=Europe/Berlin:20260105T000000
    projectSelector:
      matchLabels:
        tier: gold
    stageSelector:
      name: glob:prod-*
      matchExpressions:
      - key: region
        operator: In
        values: [eu, us]
  - name: 42
    kind: Deny
  - kind: [Allow]
  - name: business-hours
    kind: Allow
    rrule: FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR
    dtstart: TZID=Europe/Berlin:20260105T090000
    dtend: TZID=Europe/Berlin:20260105T170000
    description: written by a newer Kargo; ignored
  - name: paused-freeze
    kind: Deny
    disabled: true
    dtstart: 20260101T000000Z
    dtend: 20260102T000000Z
  - just a string
`

func TestParseWindows(t *testing.T) {
	var obj map[string]any
	if err := yaml.Unmarshal([]byte(clusterConfigYAML), &obj); err != nil {
		t.Fatal(err)
	}
	got, errs := ParseWindows(obj)
	want := []Window{
		{
			Name: "weekend-freeze", Kind: KindDeny, RRule: "FREQ=WEEKLY;BYDAY=SA",
			DTStart: "TZID=Europe/Berlin:20260103T000000", DTEnd: "TZID=Europe/Berlin:20260105T000000",
			ProjectSelector: &Selector{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "gold"}}},
			StageSelector: &Selector{Name: "glob:prod-*", LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "region", Operator: metav1.LabelSelectorOpIn, Values: []string{"eu", "us"}},
			}}},
		},
		{
			Name: "business-hours", Kind: KindAllow, RRule: "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR",
			DTStart: "TZID=Europe/Berlin:20260105T090000", DTEnd: "TZID=Europe/Berlin:20260105T170000",
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("windows (-want +got):\n%s", diff)
	}
	var named []string
	for _, err := range errs {
		for _, we := range WindowErrors(err) {
			named = append(named, we.Window+" "+we.Field)
		}
	}
	if diff := cmp.Diff([]string{"#1 name", "#2 kind", "paused-freeze disabled", "#5 (window)"}, named); diff != "" {
		t.Errorf("errors (-want +got):\n%s\n%v", diff, errs)
	}
	if !errors.Is(errs[2], ErrDisabled) {
		t.Errorf("the disabled window's error is %v, want ErrDisabled", errs[2])
	}
	if _, err := CompileClusterWide(got[0]); err != nil {
		t.Errorf("the parsed window does not compile: %v", err)
	}
}

func TestParseWindowNeverPanicsOnGarbage(t *testing.T) {
	cyclic := map[string]any{"name": "loop"}
	cyclic["stageSelector"] = cyclic
	tests := []struct {
		name string
		item any
	}{
		{name: "nil", item: nil},
		{name: "a list", item: []any{"a"}},
		{name: "kind not a string", item: map[string]any{"name": "w", "kind": int64(1)}},
		{name: "name not a string", item: map[string]any{"name": 3.5}},
		{name: "selector not an object", item: map[string]any{"name": "w", "stageSelector": "prod"}},
		{name: "matchLabels values not strings", item: map[string]any{"name": "w", "stageSelector": map[string]any{"matchLabels": map[string]any{"env": int64(1)}}}},
		{name: "matchExpressions not a list", item: map[string]any{"name": "w", "stageSelector": map[string]any{"matchExpressions": map[string]any{}}}},
		{name: "values not a list", item: map[string]any{"name": "w", "stageSelector": map[string]any{"matchExpressions": []any{map[string]any{"key": "k", "operator": "In", "values": "v"}}}}},
		{name: "NaN", item: map[string]any{"name": "w", "rrule": math.NaN()}},
		{name: "a map with non-string keys", item: map[string]any{"name": "w", "stageSelector": map[any]any{1: 2}}},
		{name: "a cycle", item: cyclic},
		{name: "a Go value", item: map[string]any{"name": "w", "dtstart": make(chan int)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w, err := ParseWindow(tt.item)
			if err == nil {
				t.Fatalf("ParseWindow = %+v, want an error", w)
			}
			if len(WindowErrors(err)) != 1 {
				t.Errorf("error %v is not one *WindowError", err)
			}
		})
	}
}

func TestParseWindowsWithoutWindows(t *testing.T) {
	for _, obj := range []map[string]any{
		nil,
		{"spec": "odd"},
		{"spec": map[string]any{}},
		{"spec": map[string]any{"promotionWindows": nil}},
	} {
		if got, errs := ParseWindows(obj); got != nil || errs != nil {
			t.Errorf("ParseWindows(%v) = %v, %v", obj, got, errs)
		}
	}
	if _, errs := ParseWindows(map[string]any{"spec": map[string]any{"promotionWindows": "all of them"}}); len(errs) != 1 {
		t.Errorf("a non-list gave errors %v", errs)
	}
}
