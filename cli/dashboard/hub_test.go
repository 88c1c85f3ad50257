package dashboard

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func stage(name, phase string) Stage {
	return Stage{Project: "p", Name: name, Status: json.RawMessage(`{"phase":"` + phase + `"}`)}
}

func keys(m map[string]json.RawMessage) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = string(v)
	}
	return out
}

// A page gets everything first, then only what changed: a change to one
// Stage of many sends that Stage alone, a removal sends null.
func TestHubSendsOnlyWhatChanged(t *testing.T) {
	h := newHub()
	now := time.Unix(0, 0)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(h.update(Snapshot{Stages: []Stage{stage("a", "Idle"), stage("b", "Idle")}}))
	var v view
	m, _ := h.next(&v, now)
	if m == nil || !m.Full || len(m.Stages) != 2 {
		t.Fatalf("first message %+v, want everything", m)
	}
	if m, _ := h.next(&v, now); m != nil {
		t.Fatalf("nothing changed, yet %+v", m)
	}
	must(h.update(Snapshot{Stages: []Stage{stage("a", "Idle"), stage("b", "Latched")}}))
	m, wake := h.next(&v, now)
	if m == nil || m.Full {
		t.Fatalf("message %+v, want a diff", m)
	}
	want := map[string]string{"p/b": `{"project":"p","name":"b","status":{"phase":"Latched"}}`}
	if d := cmp.Diff(want, keys(m.Stages)); d != "" {
		t.Errorf("diff (-want +got):\n%s", d)
	}
	must(h.update(Snapshot{Stages: []Stage{stage("a", "Idle")}}))
	select {
	case <-wake:
	default:
		t.Fatal("a change did not wake the page")
	}
	m, wake = h.next(&v, now)
	if d := cmp.Diff(map[string]string{"p/b": "null"}, keys(m.Stages)); d != "" {
		t.Errorf("removal (-want +got):\n%s", d)
	}
	must(h.update(Snapshot{Stages: []Stage{stage("a", "Idle")}}))
	select {
	case <-wake:
		t.Fatal("the same state woke the page")
	default:
	}
}

func TestHubSendsAccessChanges(t *testing.T) {
	h := newHub()
	var v view
	h.next(&v, time.Time{})
	h.setAccess(map[string]Access{"p": {Pause: true}})
	m, _ := h.next(&v, time.Time{})
	if m == nil || !m.Access["p"].Pause || len(m.Stages) != 0 {
		t.Fatalf("message %+v, want the access alone", m)
	}
}

func TestUpstreamOfReadsRequestedFreight(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"requestedFreight": []any{
		map[string]any{"origin": map[string]any{"kind": "Warehouse", "name": "w"}, "sources": map[string]any{"direct": true}},
		map[string]any{"sources": map[string]any{"stages": []any{"uat", "qa"}}},
		map[string]any{"sources": map[string]any{"stages": []any{"qa"}}},
		"garbage",
	}}}}
	up, direct := UpstreamOf(u)
	if d := cmp.Diff([]string{"qa", "uat"}, up); d != "" || !direct {
		t.Errorf("upstream %v direct %v", up, direct)
	}
	if up, direct := UpstreamOf(&unstructured.Unstructured{Object: map[string]any{}}); up != nil || direct {
		t.Errorf("a Stage without requests: %v %v", up, direct)
	}
}

// A change to a Stage resends that Stage, never the pauses that did not
// change.
func TestHubKeepsUnchangedPausesWhenAStageChanges(t *testing.T) {
	h := newHub()
	p := Pause{Project: "p", Name: "x", Stage: "a", Reason: "Manual"}
	if err := h.update(Snapshot{Stages: []Stage{stage("a", "Idle")}, Pauses: []Pause{p}}); err != nil {
		t.Fatal(err)
	}
	var v view
	h.next(&v, time.Time{})
	if err := h.update(Snapshot{Stages: []Stage{stage("a", "Latched")}, Pauses: []Pause{p}}); err != nil {
		t.Fatal(err)
	}
	m, _ := h.next(&v, time.Time{})
	if len(m.Stages) != 1 || len(m.Pauses) != 0 {
		t.Errorf("stages %v pauses %v, want the Stage alone", keys(m.Stages), keys(m.Pauses))
	}
}
