package controller

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// A record written by a newer kargo-latch is left alone: one Warning, and
// no write of any kind, although the Stage would fail and pause under this
// version's rules.
func TestNewerRecordIsLeftAlone(t *testing.T) {
	newer := `{"version":2,"phase":"Hyperlatched","promotedAt":"2026-11-29T10:00:00Z","future":{"x":1}}`
	stage := failedStage()
	stage.SetAnnotations(map[string]string{api.PauseOnFailureAnnotation: "true", api.StateAnnotation: newer})
	f := newFixture(t, false, stage)
	msg := f.waitEvent("Warning NewerState")
	if !strings.Contains(msg, "newer kargo-latch") {
		t.Errorf("Warning: %s", msg)
	}
	waitUntil(t, func() bool { return f.syncs() >= 1 })
	f.idle()
	for _, a := range f.client.Actions() {
		if v := a.GetVerb(); v != "get" && v != "list" && v != "watch" {
			t.Errorf("wrote to a Stage with a newer record: %s %s", v, a.GetResource().Resource)
		}
	}
	u, err := f.client.Resource(kargo.StagesResource).Namespace("shop").Get(context.Background(), "prod", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := u.GetAnnotations()[api.StateAnnotation]; got != newer {
		t.Errorf("record changed to %s", got)
	}
}

// failedRecord is the record of a cycle that failed after its latch: what
// a fresh start from healthyStage's status would not rebuild.
func failedRecord() latch.Record {
	at := func(minute int) *time.Time { return ptrTime(time.Date(2026, 11, 29, 10, minute, 0, 0, time.UTC)) }
	return latch.Record{Phase: latch.PhaseFailed, Promotion: "p1", FreightID: "F1", ExaminedPromotion: "p1",
		PromotedAt: at(0), LatchedAt: at(1), Marked: []string{"f1"},
		Failure: &latch.Failure{Reason: latch.ReasonDegraded, Message: "Unhealthy for 5m0s after the latch", At: *at(9)}}
}

// counterSum sums a counter of the fixture over its series whose labels
// include labels.
func (f *fixture) counterSum(name string, labels map[string]string) float64 {
	f.t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	series:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, p := range m.GetLabel() {
				got[p.GetName()] = p.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue series
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// invalidState labels kargo_latch_invalid_input_total of a garbage or
// unreadable record of Stage shop/prod.
var invalidState = map[string]string{"project": "shop", "stage": "prod", "input": "state"}

// A cached copy of the record that this process cannot inflate (a bug) is
// not "no record": a Warning and the metric say so, the record is read from
// the Stage on the API server, and the failure it holds is kept. Taken for
// no record, it would be written over by a fresh start.
func TestUnreadableCachedRecordIsNeverWrittenOver(t *testing.T) {
	prior := failedRecord()
	f := newFixture(t, false, healthyStage("prod", map[string]any{api.StateAnnotation: prior.Encode()}))
	waitUntil(t, func() bool { return f.syncs() >= 1 })
	f.idle()
	if n := f.patches.Load(); n != 0 {
		t.Fatalf("%d patches of a Stage whose record holds", n)
	}

	f.syncUnreadableCopy("")
	f.idle()
	if n := f.patches.Load(); n != 0 {
		t.Errorf("%d patches: the record was written over", n)
	}
	if diff := cmp.Diff(prior, f.record("prod")); diff != "" {
		t.Errorf("stored record (-before +after):\n%s", diff)
	}
	// The recorder took the Events during the syncs, now over.
	if warned := slices.ContainsFunc(f.drainEvents(), func(e string) bool {
		return strings.HasPrefix(e, "Warning InvalidState") && strings.Contains(e, "cannot read its cached copy")
	}); !warned {
		t.Error("no InvalidState Warning about the unreadable copy")
	}
	if n := f.counterSum("kargo_latch_invalid_input_total", invalidState); n != 1 {
		t.Errorf("kargo_latch_invalid_input_total{input=\"state\"} = %v, want 1", n)
	}
}

// drainEvents returns the Events the recorder holds now.
func (f *fixture) drainEvents() []string {
	var events []string
	for {
		select {
		case e := <-f.recorder.Events:
			events = append(events, e)
		default:
			return events
		}
	}
}

// A garbage record is replaced by a fresh start, as the contract says, but
// never lost: the write of the fresh record keeps it, verbatim, in
// kargo-latch.io/invalid-state, and the Warning says where.
func TestGarbageRecordIsKeptBesideTheFreshOne(t *testing.T) {
	garbage := strings.TrimSuffix(failedRecord().Encode(), "}") + `,"pauses":["hold"` // a hand edit gone wrong
	f := newFixture(t, false, healthyStage("prod", map[string]any{api.StateAnnotation: garbage}))
	msg := f.waitEvent("Warning InvalidState")
	if !strings.Contains(msg, kargo.InvalidStateAnnotation) {
		t.Errorf("the Warning does not say where the garbage is kept: %s", msg)
	}
	f.waitEvent("Normal HealthLatched")
	u, err := f.client.Resource(kargo.StagesResource).Namespace("shop").Get(context.Background(), "prod", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := u.GetAnnotations()[kargo.InvalidStateAnnotation]; got != garbage {
		t.Errorf("%s = %q, want the garbage record %q", kargo.InvalidStateAnnotation, got, garbage)
	}
	if r := f.record("prod"); r.Phase != latch.PhaseLatched || r.Failure != nil {
		t.Errorf("fresh record: phase %s, failure %+v; want a fresh start, Latched", r.Phase, r.Failure)
	}
	if n := f.counterSum("kargo_latch_invalid_input_total", invalidState); n != 1 {
		t.Errorf("kargo_latch_invalid_input_total{input=\"state\"} = %v, want 1", n)
	}
}
