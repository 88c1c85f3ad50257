package e2e

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/kargo"
)

// TestMarkVerifiedCutShortAfterItsPatchGetsOneEvent: a process killed
// between its Freight patch and its FreightVerified Event, made
// deterministic. Before the operator starts, the Stage's cycle is latched
// and not yet marked, and its Freight carries the mark exactly as
// kargo-latch writes it: its merge patch of freights/status, as its
// identity, with its field manager, at the stored latchedAt. The operator
// finds its own mark (the API server's managedFields name kargo-latch), and
// makes the one Event owed, without writing the Freight again.
func TestMarkVerifiedCutShortAfterItsPatchGetsOneEvent(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	// Mark-verified off for now: the cycle latches, and nothing marks it.
	first := startOperatorAs(t, env.marker, ns, fastSettings())
	s := env.createStage(t, ns, "test", nil, appsAB)
	r, name := latchByApps(t, s)
	first.idle(t)
	first.stop()
	if len(r.Marked) != 0 {
		t.Fatalf("record names marked Freight %q with mark-verified off", r.Marked)
	}

	annotate, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": markVerified}})
	must(t, err)
	_, err = env.dyn.Resource(kargo.StagesResource).Namespace(ns).Patch(ctx, s.Name, types.MergePatchType, annotate, metav1.PatchOptions{})
	must(t, err)
	verifiedAt := rfc3339(*r.LatchedAt)
	mark, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"resourceVersion": freightOnServer(t, ns, name).GetResourceVersion()},
		"status":   map[string]any{"verifiedIn": map[string]any{s.Name: map[string]any{"verifiedAt": verifiedAt}}},
	})
	must(t, err)
	_, err = dynamic.NewForConfigOrDie(env.marker).Resource(kargo.FreightsResource).Namespace(ns).
		Patch(ctx, name, types.MergePatchType, mark, metav1.PatchOptions{FieldManager: api.FieldManager}, "status")
	must(t, err)
	marked := freightOnServer(t, ns, name)

	op := startOperatorAs(t, env.marker, ns, fastSettings())
	waitFor(t, "the record to name the marked Freight", func() bool { return slices.Contains(stageRecord(t, s).Marked, name) })
	op.idle(t)
	events := env.stageEvents(t, s)[api.ReasonFreightVerified]
	if len(events) != 1 || events[0].Count > 1 || !strings.Contains(events[0].Message, name) || !strings.Contains(events[0].Message, verifiedAt) {
		t.Errorf("FreightVerified Events %+v, want exactly one naming %s and %s", events, name, verifiedAt)
	}
	if after := freightOnServer(t, ns, name); after.GetResourceVersion() != marked.GetResourceVersion() {
		t.Errorf("the marked Freight was written again (resourceVersion %s -> %s)", marked.GetResourceVersion(), after.GetResourceVersion())
	}
	// The mark was the killed process's: this one counts none.
	if n := op.metric("kargo_latch_freight_verified_total", "project", ns, "stage", s.Name); n != 0 {
		t.Errorf("kargo_latch_freight_verified_total = %v, want 0", n)
	}
}
