package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// The drain lists the Stage's Promotions from the API server when the pause
// takes effect. The race is made certain rather than likely: the operator's
// Promotion informer gets its initial list and nothing after it (its watch
// stream goes silent), so its cache never holds the Promotion queued just
// before the pause.
func TestDrainSeesAPromotionTheCacheHasNot(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	var silenced atomic.Int64
	startOperatorWith(t, env.operator, ns, latch.Settings{LatchDeadline: time.Minute, DegradedGrace: time.Minute, DrainOnPause: true},
		func(rt http.RoundTripper) http.RoundTripper {
			return roundTripFunc(func(r *http.Request) (*http.Response, error) {
				resp, err := rt.RoundTrip(r)
				if err == nil && resp.StatusCode == http.StatusOK && r.URL.Query().Get("watch") == "true" && strings.HasSuffix(r.URL.Path, "/promotions") {
					silenced.Add(1)
					resp.Body = silentAfterInitialEvents(resp.Body, r.URL.Query().Get("sendInitialEvents") == "true")
				}
				return resp, err
			})
		})
	// The operator's caches have synced (it recorded the Stage) before the
	// Promotion exists.
	waitPhase(t, env.createStage(t, ns, "prod", nil), latch.PhaseIdle)
	queued := queuedAutoPromotion(t, ns, "prod")

	must(t, createPause(env.dev, pause(ns, "stop", "prod", "Manual")))
	drained := waitDrained(t, ns, "stop")
	if !slices.Equal(drained, []string{queued}) {
		t.Errorf("drained %v, want %v", drained, []string{queued})
	}
	if silenced.Load() == 0 {
		t.Error("the operator's Promotion watch was never silenced: the test proves nothing")
	}
}

// silentAfterInitialEvents passes a watch stream through up to the bookmark
// that ends its initial events (for a plain watch, none), then delivers
// nothing more until it is closed.
func silentAfterInitialEvents(body io.ReadCloser, initialEvents bool) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		if !initialEvents {
			return
		}
		dec := json.NewDecoder(body)
		for {
			var event json.RawMessage
			if err := dec.Decode(&event); err != nil {
				pw.CloseWithError(err)
				return
			}
			if _, err := pw.Write(event); err != nil {
				return
			}
			if bytes.Contains(event, []byte(`"k8s.io/initial-events-end":"true"`)) {
				return // silent from here: the stream stays open, with no news
			}
		}
	}()
	return struct {
		io.Reader
		io.Closer
	}{pr, closers{pr, body}}
}

type closers []io.Closer

func (cs closers) Close() error {
	for _, c := range cs {
		_ = c.Close()
	}
	return nil
}

// A cycle paused before its latch, whose queued auto-promotion the drain
// aborted, is health-blind in Kargo until the next promotion ("last
// Promotion did not succeed"). The latch deadline holds while it is paused,
// so the blackout is not a failure (nor a second pause); after the resume,
// it counts again from the resume.
func TestDrainedCycleDoesNotFailWhilePaused(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	// Long enough for the setup below (a Promotion, a pause) to come first
	// on a loaded machine: a deadline passing before the pause is another
	// scenario (a failure, its own pause).
	const deadline = 5 * time.Second
	op := startOperator(t, ns, latch.Settings{LatchDeadline: deadline, DegradedGrace: time.Minute, DrainOnPause: true, PauseOnFailure: true})
	prod := env.createStage(t, ns, "prod", nil)
	_, err := prod.StartPromotion(ctx)
	must(t, err)
	_, err = prod.FinishPromotion(ctx, "Succeeded")
	must(t, err)
	must(t, prod.SetHealth(ctx, kargo.HealthProgressing))
	waitPhase(t, prod, latch.PhasePromoted)

	queuedAutoPromotion(t, ns, "prod")
	must(t, createPause(env.dev, pause(ns, "hold", "prod", "Manual")))
	waitDrained(t, ns, "hold")
	// Kargo replays the aborted Promotion: it becomes lastPromotion, and
	// health is Unknown by construction.
	_, err = prod.FinishPromotion(ctx, "Aborted")
	must(t, err)
	time.Sleep(deadline + 500*time.Millisecond) // the deadline passes while paused
	// Proof that the operator judged the Stage after the deadline: it reads
	// its settings from the Stage (here, the deadline it already has).
	op.sees(t, "the Stage's settings after the deadline", func() error {
		_, err := env.dyn.Resource(kargo.StagesResource).Namespace(ns).Patch(ctx, prod.Name, types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"`+api.LatchDeadlineAnnotation+`":"`+deadline.String()+`"}}}`), metav1.PatchOptions{})
		return err
	})
	op.idle(t)
	if r := stageRecord(t, prod); r.Phase != latch.PhasePromoted || r.Failure != nil {
		t.Fatalf("phase %s, failure %+v past the deadline while paused; want Promoted, no failure", r.Phase, r.Failure)
	}
	if n := len(env.listPauses(t, ns)); n != 1 {
		t.Errorf("%d StagePauses, want only the person's", n)
	}

	resumedAt := time.Now()
	must(t, deletePause(env.lead, ns, "hold"))
	r := waitPhase(t, prod, latch.PhaseFailed)
	if r.Failure.Reason != latch.ReasonLatchDeadlineExceeded || r.ResumedAt == nil {
		t.Fatalf("failure %+v, resumedAt %v; want LatchDeadlineExceeded counted from the resume", r.Failure, r.ResumedAt)
	}
	if since := r.Failure.At.Sub(*r.ResumedAt); since < deadline {
		t.Errorf("failed %v after the resume, want the whole deadline (%v) after it", since, deadline)
	}
	if took := time.Since(resumedAt); took < deadline {
		t.Errorf("failed %v after the resume, want at least %v", took, deadline)
	}
}

// queuedAutoPromotion creates a Pending auto-promotion to stage, as Kargo's
// controller does, and returns its name.
func queuedAutoPromotion(t *testing.T, ns, stage string) string {
	t.Helper()
	p, err := driver.CreatePromotion(ctx, env.kargoCtl, ns, stage, "")
	must(t, err)
	must(t, env.kargo.SetPromotionPhase(ctx, ns, p.GetName(), "Pending"))
	return p.GetName()
}

// waitDrained waits for the pause's status.drained and returns it.
func waitDrained(t *testing.T, ns, name string) []string {
	t.Helper()
	var drained []string
	waitFor(t, "status.drained of "+name, func() bool {
		u, err := env.dyn.Resource(v1alpha1.StagePausesResource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		must(t, err)
		drained, _, _ = unstructured.NestedStringSlice(u.Object, "status", "drained")
		return len(drained) > 0
	})
	return drained
}

// An API server admits an auto-promotion in the moment before its gate's
// view of the pauses has a new pause (or an ungated identity makes one).
// The drain's read came first; the operator aborts it once its cache shows
// it, and lists it in the pause's status.drained.
func TestLateAutoPromotionIsDrainedWhilePaused(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	startOperator(t, ns, latch.Settings{LatchDeadline: time.Minute, DegradedGrace: time.Minute, DrainOnPause: true})
	prod := env.createStage(t, ns, "prod", nil)
	must(t, createPause(env.dev, pause(ns, "hold", "prod", "Manual")))
	waitPaused(t, prod, true)

	// An auto-promotion admitted before the gate knew the pause: made as a
	// person's (the gate lets that pass), then stripped of its actor (the
	// gate judges creates only).
	late, err := driver.CreatePromotion(ctx, env.dyn, ns, "prod", "kubernetes:admin")
	must(t, err)
	late, err = env.dyn.Resource(kargo.PromotionsResource).Namespace(ns).Patch(ctx, late.GetName(), types.MergePatchType,
		[]byte(`{"metadata":{"annotations":{"`+kargo.CreateActorAnnotation+`":null}}}`), metav1.PatchOptions{})
	must(t, err)
	must(t, env.kargo.SetPromotionPhase(ctx, ns, late.GetName(), "Pending"))
	if drained := waitDrained(t, ns, "hold"); !slices.Equal(drained, []string{late.GetName()}) {
		t.Errorf("status.drained = %v, want [%s]", drained, late.GetName())
	}
	u, err := env.dyn.Resource(kargo.PromotionsResource).Namespace(ns).Get(ctx, late.GetName(), metav1.GetOptions{})
	must(t, err)
	if _, aborted := u.GetAnnotations()[kargo.AbortAnnotation]; !aborted {
		t.Errorf("the late auto-promotion %s was not aborted", late.GetName())
	}
}
