package cli

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

func fakeClient(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		kargo.StagesResource:         "StageList",
		kargo.PromotionsResource:     "PromotionList",
		kargo.FreightsResource:       "FreightList",
		v1alpha1.StagePausesResource: "StagePauseList",
	}, objs...)
}

// lockedBuffer is a buffer a test reads while a wait writes it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// runningWait is a wait running against a fake API server.
type runningWait struct {
	stdout, stderr lockedBuffer
	done           chan error
}

func startWait(ctx context.Context, client *dynamicfake.FakeDynamicClient, o waitOptions) *runningWait {
	w := &runningWait{done: make(chan error, 1)}
	go func() { w.done <- o.wait(ctx, client, "project", "prod", &w.stdout, &w.stderr) }()
	return w
}

// progressed waits until the wait reported progress containing want.
func (w *runningWait) progressed(t *testing.T, want string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for !strings.Contains(w.stderr.String(), want) {
		select {
		case err := <-w.done:
			t.Fatalf("the wait ended (%v) before reporting %q; stderr:\n%s", err, want, w.stderr.String())
		case <-deadline:
			t.Fatalf("no progress %q; stderr:\n%s", want, w.stderr.String())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (w *runningWait) result(t *testing.T) error {
	t.Helper()
	select {
	case err := <-w.done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("the wait did not end; stderr:\n%s", w.stderr.String())
		return nil
	}
}

func updateStage(t *testing.T, client *dynamicfake.FakeDynamicClient, u *unstructured.Unstructured) {
	t.Helper()
	if _, err := client.Resource(kargo.StagesResource).Namespace("project").Update(t.Context(), u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A pipeline promoted: the Stage runs the promotion and still shows the
// previous cycle Latched. The wait waits for the new promotion's cycle, and
// ends when it latches.
func TestWaitForTheNewPromotionsLatch(t *testing.T) {
	t.Parallel()
	client := fakeClient(prodStage(kargoView{current: promo2, last: promo1, lastPhase: promotionSucceeded},
		cycleOf(promo1, latch.PhaseLatched, nil)))
	w := startWait(t.Context(), client, waitOptions{condition: "latched"})
	w.progressed(t, "promotion "+promo2+" is Running")

	updateStage(t, client, prodStage(kargoView{last: promo2, lastPhase: promotionSucceeded}, cycleOf(promo2, latch.PhasePromoted, nil)))
	w.progressed(t, "the cycle of promotion "+promo2+" is Promoted")
	updateStage(t, client, prodStage(kargoView{last: promo2, lastPhase: promotionSucceeded}, cycleOf(promo2, latch.PhaseLatched, nil)))
	if err := w.result(t); err != nil {
		t.Fatalf("wait: %v", err)
	}
	if got := w.stdout.String(); !strings.HasPrefix(got, "stage project/prod: the cycle of promotion "+promo2+" latched at") {
		t.Errorf("stdout %q", got)
	}
}

func TestWaitFailsWithTheReason(t *testing.T) {
	t.Parallel()
	client := fakeClient(prodStage(kargoView{last: promo1, lastPhase: promotionSucceeded}, cycleOf(promo1, latch.PhasePromoted, nil)))
	w := startWait(t.Context(), client, waitOptions{condition: "latched"})
	w.progressed(t, "is Promoted")
	updateStage(t, client, prodStage(kargoView{last: promo1, lastPhase: promotionSucceeded}, cycleOf(promo1, latch.PhaseFailed, nil)))
	err := w.result(t)
	if exitCode(err, true) != ExitFailed || !strings.Contains(err.Error(), "failed: LatchDeadlineExceeded: Stage was not Healthy") {
		t.Errorf("wait: %v (exit %d), want exit 1 with the reason", err, exitCode(err, true))
	}
}

func TestWaitTimesOut(t *testing.T) {
	t.Parallel()
	client := fakeClient(prodStage(kargoView{last: promo1, lastPhase: promotionSucceeded}, cycleOf(promo1, latch.PhasePromoted, nil)))
	err := startWait(t.Context(), client, waitOptions{condition: "latched", timeout: 2 * time.Second}).result(t)
	want := "timed out after 2s waiting for stage project/prod to be latched; last seen: the cycle of promotion " + promo1 + " is Promoted"
	if exitCode(err, true) != ExitTimeout || err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("wait: %v (exit %d), want exit 3: %s", err, exitCode(err, true), want)
	}
}

func TestWaitInterrupted(t *testing.T) {
	t.Parallel()
	client := fakeClient(prodStage(kargoView{}, latch.Record{}))
	ctx, interrupt := context.WithCancel(t.Context())
	w := startWait(ctx, client, waitOptions{condition: "paused"})
	w.progressed(t, "the Stage is not paused")
	interrupt()
	if err := w.result(t); exitCode(err, true) != ExitInterrupted {
		t.Errorf("wait: %v (exit %d), want exit 130", err, exitCode(err, true))
	}
}

func TestWaitForPause(t *testing.T) {
	t.Parallel()
	client := fakeClient(prodStage(kargoView{}, latch.Record{}))
	w := startWait(t.Context(), client, waitOptions{condition: "paused"})
	w.progressed(t, "the Stage is not paused")
	p := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "StagePause",
		"metadata": map[string]any{"name": "project-x", "namespace": "project"},
		"spec":     map[string]any{"stage": v1alpha1.AllStages, "reason": "ProjectPause"},
	}}
	if _, err := client.Resource(v1alpha1.StagePausesResource).Namespace("project").Create(t.Context(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := w.result(t); err != nil {
		t.Fatalf("wait: %v", err)
	}
	if got, want := w.stdout.String(), "stage project/prod: the Stage is paused by StagePause project-x (reason ProjectPause)\n"; got != want {
		t.Errorf("stdout %q, want %q", got, want)
	}
}

// Kargo verified the Freight itself (mark-verified off): the wait sees it
// on the Freight.
func TestWaitForVerifiedByKargo(t *testing.T) {
	t.Parallel()
	freight := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kargo.GroupVersion.String(), "kind": "Freight",
		"metadata": map[string]any{"name": "f2", "namespace": "project"},
	}}
	client := fakeClient(prodStage(kargoView{last: promo2, lastPhase: promotionSucceeded, freightID: "fc-" + promo2, freight: []string{"f2"}},
		cycleOf(promo2, latch.PhaseLatched, nil)), freight)
	w := startWait(t.Context(), client, waitOptions{condition: "verified", promotion: promo2})
	w.progressed(t, "its Freight is not verified in the Stage yet")
	freight = freight.DeepCopy()
	freight.Object["status"] = map[string]any{"verifiedIn": map[string]any{"prod": map[string]any{"verifiedAt": now.Format(time.RFC3339)}}}
	if _, err := client.Resource(kargo.FreightsResource).Namespace("project").Update(t.Context(), freight, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := w.result(t); err != nil {
		t.Fatalf("wait: %v", err)
	}
	if got := w.stdout.String(); !strings.Contains(got, "Freight f2 is verified in the Stage") {
		t.Errorf("stdout %q", got)
	}
}

func TestWaitRefusesWhatIsNotThere(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		o    waitOptions
		objs []runtime.Object
		want string
	}{
		"no Stage":     {o: waitOptions{condition: "latched"}, want: "no such Stage prod in project project"},
		"no promotion": {o: waitOptions{condition: "latched", promotion: promo3}, objs: []runtime.Object{prodStage(kargoView{}, latch.Record{})}, want: "no such promotion " + promo3},
		"another Stage's": {o: waitOptions{condition: "latched", promotion: "test.01jx0000000000000000000009.fffffff"}, objs: []runtime.Object{
			prodStage(kargoView{}, latch.Record{}),
			&unstructured.Unstructured{Object: map[string]any{
				"apiVersion": kargo.GroupVersion.String(), "kind": "Promotion",
				"metadata": map[string]any{"name": "test.01jx0000000000000000000009.fffffff", "namespace": "project"},
				"spec":     map[string]any{"stage": "test"},
			}},
		}, want: "is for Stage test, not prod"},
	} {
		t.Run(name, func(t *testing.T) {
			err := startWait(t.Context(), fakeClient(c.objs...), c.o).result(t)
			if err == nil || !strings.Contains(err.Error(), c.want) || exitCode(err, true) != ExitFailed {
				t.Errorf("wait: %v, want exit 1 with %q", err, c.want)
			}
		})
	}
}

// A person rolled back during the pause, so Kargo holds auto-promotion
// itself: the wait for resumed mentions the hold while paused, and once
// the pause is deleted ends at once with exit 4, naming the hold and how to
// release it.
func TestWaitForResumedWhileKargoHolds(t *testing.T) {
	t.Parallel()
	p := incidentPause()
	client := fakeClient(prodStage(kargoView{holds: rollbackHold}, latch.Record{}), p)
	w := startWait(t.Context(), client, waitOptions{condition: "resumed"})
	w.progressed(t, "the Stage is paused by StagePause inc-1 (reason Incident); Kargo itself still holds auto-promotion from Warehouse/images")
	if err := client.Resource(v1alpha1.StagePausesResource).Namespace("project").Delete(t.Context(), "inc-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err := w.result(t)
	want := "stage project/prod: the Stage is not paused, but Kargo itself still holds auto-promotion from Warehouse/images at Freight f1"
	if exitCode(err, true) != ExitHeld || err == nil || !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "kargo promote --project project --stage prod") {
		t.Errorf("wait: %v (exit %d), want exit 4: %s...", err, exitCode(err, true), want)
	}
	if w.stdout.String() != "" {
		t.Errorf("stdout %q, want nothing: the condition was not reached", w.stdout.String())
	}
}

// Review finding 1: after a rollback to Freight verified in an earlier
// cycle, the Freight's verifiedIn is there at once. The wait for verified
// waits for this cycle's latch all the same, and ends when it latches.
func TestWaitForVerifiedAfterARollback(t *testing.T) {
	t.Parallel()
	freight := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kargo.GroupVersion.String(), "kind": "Freight",
		"metadata": map[string]any{"name": "f1", "namespace": "project"},
		"status":   map[string]any{"verifiedIn": map[string]any{"prod": map[string]any{"verifiedAt": ago(time.Hour).Format(time.RFC3339)}}},
	}}
	rolledBack := kargoView{last: promo2, lastPhase: promotionSucceeded, freightID: "fc-" + promo2, freight: []string{"f1"}}
	client := fakeClient(prodStage(rolledBack, cycleOf(promo2, latch.PhasePromoted, nil)), freight)
	w := startWait(t.Context(), client, waitOptions{condition: "verified"})
	// The wait has read the Freight, and judged its old mark.
	w.progressed(t, "the cycle of promotion "+promo2+" is Promoted, waiting for the latch; Freight f1 was verified in the Stage before this cycle's promotion")
	// It judged the old mark (the progress above) and did not end on it.
	select {
	case err := <-w.done:
		t.Fatalf("the wait ended (%v) before the cycle latched; stdout %q", err, w.stdout.String())
	default:
	}
	updateStage(t, client, prodStage(rolledBack, cycleOf(promo2, latch.PhaseLatched, nil)))
	if err := w.result(t); err != nil {
		t.Fatalf("wait: %v", err)
	}
	if got := w.stdout.String(); !strings.Contains(got, "Freight f1 is verified in the Stage") {
		t.Errorf("stdout %q", got)
	}
}

// Review finding 2: a wait for verified watches only the cycle's Freight,
// each selected by name, not every Freight of the project.
func TestWaitForVerifiedWatchesOnlyTheCyclesFreight(t *testing.T) {
	t.Parallel()
	client := fakeClient(prodStage(kargoView{last: promo2, lastPhase: promotionSucceeded, freightID: "fc-" + promo2, freight: []string{"f2"}},
		cycleOf(promo2, latch.PhaseLatched, nil)))
	w := startWait(t.Context(), client, waitOptions{condition: "verified", timeout: time.Second})
	w.progressed(t, "its Freight is not verified in the Stage yet")
	waitFreightWatched(t, client, "f2")
	if err := w.result(t); exitCode(err, true) != ExitTimeout {
		t.Fatalf("wait: %v, want a timeout", err)
	}
	for _, a := range client.Actions() {
		if a.GetResource() != kargo.FreightsResource {
			continue
		}
		var fields string
		switch a := a.(type) {
		case k8stesting.ListAction:
			fields = a.GetListRestrictions().Fields.String()
		case k8stesting.WatchAction:
			fields = a.GetWatchRestrictions().Fields.String()
		}
		if fields != "metadata.name=f2" {
			t.Errorf("%s freights with field selector %q, want metadata.name=f2", a.GetVerb(), fields)
		}
	}
}

// waitFreightWatched waits until the wait has listed and watched Freight
// name.
func waitFreightWatched(t *testing.T, client *dynamicfake.FakeDynamicClient, name string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		listed, watched := false, false
		for _, a := range client.Actions() {
			if a.GetResource() != kargo.FreightsResource {
				continue
			}
			switch a := a.(type) {
			case k8stesting.ListAction:
				listed = listed || a.GetListRestrictions().Fields.String() == "metadata.name="+name
			case k8stesting.WatchAction:
				watched = watched || a.GetWatchRestrictions().Fields.String() == "metadata.name="+name
			}
		}
		if listed && watched {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Freight %s was not listed and watched (listed %v, watched %v)", name, listed, watched)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Review finding 2: the API server goes away during a wait without
// --timeout. The informers would retry for ever; the wait exits 1 once the
// API server has not answered for --unreachable-timeout.
func TestWaitGivesUpWhenTheAPIServerGoesAway(t *testing.T) {
	t.Parallel()
	client := fakeClient(prodStage(kargoView{last: promo1, lastPhase: promotionSucceeded}, cycleOf(promo1, latch.PhasePromoted, nil)))
	var down atomic.Bool
	var mu sync.Mutex
	var watches []*watch.RaceFreeFakeWatcher
	client.PrependWatchReactor("*", func(k8stesting.Action) (bool, watch.Interface, error) {
		if down.Load() {
			return true, nil, refused
		}
		w := watch.NewRaceFreeFake()
		mu.Lock()
		defer mu.Unlock()
		watches = append(watches, w)
		return true, w, nil
	})
	client.PrependReactor("*", "*", func(k8stesting.Action) (bool, runtime.Object, error) {
		if down.Load() {
			return true, nil, refused
		}
		return false, nil, nil
	})
	w := startWait(t.Context(), client, waitOptions{condition: "latched", unreachable: 300 * time.Millisecond})
	w.progressed(t, "is Promoted")
	down.Store(true)
	mu.Lock()
	for _, w := range watches { // the connections break
		w.Stop()
	}
	mu.Unlock()
	w.progressed(t, "the API server does not answer (dial tcp: connect: connection refused)")
	err := w.result(t)
	want := "stage project/prod: the API server could not be reached for 300ms: dial tcp: connect: connection refused; last seen: the cycle of promotion " + promo1 + " is Promoted, waiting for the latch"
	if exitCode(err, true) != ExitFailed || err == nil || err.Error() != want {
		t.Errorf("wait: %v (exit %d),\nwant exit 1: %s", err, exitCode(err, true), want)
	}
}
