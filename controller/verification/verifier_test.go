package verification

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/controller/report"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/metrics"
)

// testVerifier is a Verifier on c; its Events go to the recorder returned.
func testVerifier(c *dynamicfake.FakeDynamicClient) (*Verifier, *record.FakeRecorder) {
	events := record.NewFakeRecorder(20)
	clk := clocktesting.NewFakeClock(time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC))
	return &Verifier{
		Starter: &Starter{Dynamic: c},
		Report:  report.New(kubefake.NewClientset(), events, clk),
		Metrics: metrics.New(prometheus.NewRegistry(), "test"),
		Clock:   clk,
	}, events
}

// wantWrites checks the patches made of c so far, and the Events sent since
// the last check ("<type> <reason>").
func wantWrites(t *testing.T, c *dynamicfake.FakeDynamicClient, events *record.FakeRecorder, patches int, reasons ...string) {
	t.Helper()
	if n := calls(c, "patch"); n != patches {
		t.Errorf("%d patches, want %d", n, patches)
	}
	var got []string
	for len(events.Events) > 0 {
		f := strings.Fields(<-events.Events)
		got = append(got, f[0]+" "+f[1])
	}
	if !slices.Equal(got, reasons) {
		t.Errorf("Events %v, want %v", got, reasons)
	}
}

func TestRefusedStartsBackOff(t *testing.T) {
	want := []time.Duration{time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 16 * time.Minute, 30 * time.Minute, 30 * time.Minute}
	for i, w := range want {
		if got := backoff(i + 1); got != w {
			t.Errorf("wait after refusal %d = %v, want %v", i+1, got, w)
		}
	}
}

// A start kargo-latch cannot build is a Warning once per cycle and
// message, and each refusal of the cycle doubles the wait before the next
// try; a new cycle starts over.
func TestRefusedStartWarnsOnceAndBacksOff(t *testing.T) {
	c := starterWorld(t)
	if err := c.Resource(AnalysisTemplatesResource).Namespace("demo").Delete(context.Background(), "error-rate", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	v, events := testVerifier(c)
	var m Memo
	now := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	want := RunStart{Cycle: "c1/p1", Collection: collectionID, Run: fullInput(t).Name, Now: now}
	for i, wait := range []time.Duration{time.Minute, 2 * time.Minute} {
		outcome, found, err := v.Start(context.Background(), testStage(), &m, want)
		if err != nil || outcome != Refused || found != nil {
			t.Fatalf("start %d = %v, %v, %v; want Refused", i+1, outcome, found, err)
		}
		if got := m.RetryIn(want.Cycle, now); got != wait {
			t.Errorf("after refusal %d, retry in %v, want %v", i+1, got, wait)
		}
	}
	wantWrites(t, c, events, 0, "Warning "+api.ReasonVerificationUnsupported)
	if got := m.RetryIn("c2/p2", now); got != 0 {
		t.Errorf("another cycle waits %v, want 0", got)
	}
	want.Cycle = "c2/p2"
	if _, _, err := v.Start(context.Background(), testStage(), &m, want); err != nil {
		t.Fatal(err)
	}
	if got := m.RetryIn(want.Cycle, now); got != time.Minute {
		t.Errorf("a new cycle's first refusal waits %v, want 1m", got)
	}
}

// The cache of runs may not show a run cut short yet when the next sync
// asks again: the step is taken, and reported, once.
func TestEndCutsShortOnceWhileTheCacheLags(t *testing.T) {
	c := starterWorld(t, ownRunObject("ours", nil))
	v, events := testVerifier(c)
	var m Memo
	step := []latch.Action{{Kind: latch.ActionCutShortRun, Run: "ours", Message: "the cycle it verifies failed"}}
	for range 2 {
		if err := v.End(context.Background(), testStage(), &m, step); err != nil {
			t.Fatal(err)
		}
	}
	wantWrites(t, c, events, 1, "Normal "+api.ReasonVerificationCutShort)
}

// A run any verification in Kargo's status names, read live (the current
// one or an earlier collection's), is Kargo's: never cut short or
// terminated, and the step is not remembered as taken.
func TestEndLeavesARunKargoFollows(t *testing.T) {
	cut := map[string]string{StageLabel: "", FreightCollectionLabel: "", CutShortStageLabel: "test", CutShortCollectionLabel: "c1"}
	for name, history := range map[string][]any{
		"current": {map[string]any{"id": "c1", "verificationHistory": []any{map[string]any{"id": "v2", "analysisRun": map[string]any{"name": "ours"}}}}},
		"earlier": {map[string]any{"id": "c2"}, map[string]any{"id": "c1", "verificationHistory": []any{map[string]any{"id": "v1", "analysisRun": map[string]any{"name": "ours"}}}}},
	} {
		c := starterWorld(t, ownRunObject("ours", cut))
		setStageHistory(t, c, history)
		v, events := testVerifier(c)
		var m Memo
		steps := []latch.Action{{Kind: latch.ActionCutShortRun, Run: "ours"}, {Kind: latch.ActionTerminateRun, Run: "ours", Message: "no cycle needs it"}}
		if err := v.End(context.Background(), testStage(), &m, steps); err != nil {
			t.Fatal(err)
		}
		wantWrites(t, c, events, 0)
		if !slices.Equal(m.ended, []string{kargosStep("ours")}) {
			t.Errorf("%s: steps remembered %v, want only that the run is Kargo's", name, m.ended)
		}
		// Kargo's for good: the Stage is not read again for it.
		before := calls(c, "get")
		if err := v.End(context.Background(), testStage(), &m, steps); err != nil {
			t.Fatal(err)
		}
		if n := calls(c, "get") - before; n != 0 {
			t.Errorf("%s: %d more reads for a run known to be Kargo's", name, n)
		}
	}
	// Kargo follows another run: the run cut short is terminated.
	c := starterWorld(t, ownRunObject("ours", cut))
	setStageHistory(t, c, []any{map[string]any{"id": "c1", "verificationHistory": []any{map[string]any{"id": "v3", "analysisRun": map[string]any{"name": "kargos"}}}}})
	v, events := testVerifier(c)
	if err := v.End(context.Background(), testStage(), &Memo{}, []latch.Action{{Kind: latch.ActionTerminateRun, Run: "ours"}}); err != nil {
		t.Fatal(err)
	}
	wantWrites(t, c, events, 1, "Normal "+api.ReasonVerificationTerminated)
}

// setStageHistory gives Stage demo/test of c the freightHistory history.
func setStageHistory(t *testing.T, c *dynamicfake.FakeDynamicClient, history []any) {
	t.Helper()
	u, err := c.Resource(kargo.StagesResource).Namespace("demo").Get(context.Background(), "test", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedSlice(u.Object, history, "status", "freightHistory"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Resource(kargo.StagesResource).Namespace("demo").Update(context.Background(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// In --dry-run no run is ended.
func TestEndInDryRunWritesNothing(t *testing.T) {
	c := starterWorld(t, ownRunObject("ours", nil))
	v, events := testVerifier(c)
	v.DryRun = true
	steps := []latch.Action{{Kind: latch.ActionCutShortRun, Run: "ours"}, {Kind: latch.ActionTerminateRun, Run: "ours"}}
	if err := v.End(context.Background(), testStage(), &Memo{}, steps); err != nil {
		t.Fatal(err)
	}
	wantWrites(t, c, events, 0)
}

// testStage is Stage demo/test as the sync has it.
func testStage() *kargo.Stage {
	return &kargo.Stage{ObjectMeta: metav1.ObjectMeta{Name: "test", Namespace: "demo"}, Status: &kargo.StageStatus{}}
}

// While verify-on-latch is off, a failed cycle's run is read live until a
// read finds it out of Kargo's lookup: then never again.
func TestObserveWhileOffReadsUntilTheRunLeftTheLookup(t *testing.T) {
	c := starterWorld(t, ownRunObject("ours", nil))
	v, _ := testVerifier(c)
	var m Memo
	followed := &latch.Analysis{Actor: latch.Actor, Run: "ours"}
	if runs := v.ObserveWhileOff(context.Background(), testStage(), &m, followed); len(runs) != 1 || runs[0].CutShort != "" {
		t.Fatalf("first read = %+v, want the run in the lookup", runs)
	}
	if _, err := v.Starter.CutShort(context.Background(), "demo", "ours", "the cycle failed", time.Now()); err != nil {
		t.Fatal(err)
	}
	if runs := v.ObserveWhileOff(context.Background(), testStage(), &m, followed); len(runs) != 1 || runs[0].CutShort == "" {
		t.Fatalf("second read = %+v, want the run cut short", runs)
	}
	before := calls(c, "get")
	if runs := v.ObserveWhileOff(context.Background(), testStage(), &m, followed); runs != nil || calls(c, "get") != before {
		t.Errorf("read again after it left the lookup: %+v", runs)
	}
}
