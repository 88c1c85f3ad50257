package cli

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

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
