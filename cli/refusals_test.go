package cli

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kargo-latch/kargo-latch/latch"
)

// refusingAPI is a fake API server whose lists and watches of a resource
// turn into refusals in the middle of a wait: the watches open then break,
// and every list and watch after is refused, as when a right is revoked or
// a token expires.
type refusingAPI struct {
	client *dynamicfake.FakeDynamicClient

	mu      sync.Mutex
	refused map[string]error // by resource; "*" for all
	watches map[string][]watch.Interface
	// refusals counts the requests refused.
	refusals int
}

func newRefusingAPI(objs ...runtime.Object) *refusingAPI {
	a := &refusingAPI{client: fakeClient(objs...), refused: map[string]error{}, watches: map[string][]watch.Interface{}}
	a.client.PrependWatchReactor("*", func(action k8stesting.Action) (bool, watch.Interface, error) {
		gvr := action.GetResource()
		if err := a.refusal(gvr.Resource); err != nil {
			return true, nil, err
		}
		w, err := a.client.Tracker().Watch(gvr, action.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		a.mu.Lock()
		defer a.mu.Unlock()
		a.watches[gvr.Resource] = append(a.watches[gvr.Resource], w)
		return true, w, nil
	})
	a.client.PrependReactor("list", "*", func(action k8stesting.Action) (bool, runtime.Object, error) {
		if err := a.refusal(action.GetResource().Resource); err != nil {
			return true, nil, err
		}
		return false, nil, nil
	})
	return a
}

func (a *refusingAPI) refusal(resource string) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	err := a.refused["*"]
	if err == nil {
		err = a.refused[resource]
	}
	if err != nil {
		a.refusals++
	}
	return err
}

// refuse refuses resource ("*": all) from now on, and breaks its watches;
// a nil err answers again.
func (a *refusingAPI) refuse(resource string, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.refused[resource] = err
	if err == nil {
		return
	}
	for r, ws := range a.watches {
		if resource == "*" || r == resource {
			for _, w := range ws {
				w.Stop()
			}
			delete(a.watches, r)
		}
	}
}

func stageResource(resource string) schema.GroupResource {
	return schema.GroupResource{Group: "kargo.akuity.io", Resource: resource}
}

// Review finding H1: a refusal in the middle of a wait used to hang it for
// ever, silently (a refusal is an answer, and the informers retry it
// quietly). A refused credential, or a refused Stage or StagePause, ends
// the wait with exit 1 and the API server's message, well before the
// bound on an API server that does not answer.
func TestWaitEndsOnARefusalMidWait(t *testing.T) {
	t.Parallel()
	pause := incidentPause()
	promoted := prodStage(kargoView{last: promo1, lastPhase: promotionSucceeded}, cycleOf(promo1, latch.PhasePromoted, nil))
	for name, c := range map[string]struct {
		cond     string
		resource string
		err      error
		progress string
		want     string
	}{
		"a token that expired": {cond: "latched", resource: "*", err: apierrors.NewUnauthorized("token expired"), progress: "is Promoted",
			want: "stage project/prod: unauthorized: the API server no longer accepts the credentials (reading "},
		"the right to read Promotions revoked, with the token": {cond: "latched", resource: "promotions", err: apierrors.NewUnauthorized("token expired"),
			progress: "is Promoted", want: "stage project/prod: unauthorized: the API server no longer accepts the credentials (reading promotions in namespace project): token expired"},
		"the right to read the Stage revoked": {cond: "latched", resource: "stages", err: apierrors.NewForbidden(stageResource("stages"), "", errors.New("RBAC: role revoked")),
			progress: "is Promoted", want: "stage project/prod: forbidden: wait needs get, list and watch on stages in namespace project: stages.kargo.akuity.io is forbidden: RBAC: role revoked"},
		"the right to read StagePauses revoked": {cond: "resumed", resource: "stagepauses",
			err:      apierrors.NewForbidden(schema.GroupResource{Group: "kargo-latch.io", Resource: "stagepauses"}, "", errors.New("RBAC: role revoked")),
			progress: "the Stage is paused by StagePause inc-1",
			want:     "stage project/prod: forbidden: wait needs get, list and watch on stagepauses in namespace project: stagepauses.kargo-latch.io is forbidden: RBAC: role revoked"},
		"the StagePause CRD removed": {cond: "resumed", resource: "stagepauses",
			err:      apierrors.NewNotFound(schema.GroupResource{Group: "kargo-latch.io", Resource: "stagepauses"}, ""),
			progress: "the Stage is paused by StagePause inc-1", want: "stage project/prod: not found: the API server does not serve stagepauses in namespace project"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			api := newRefusingAPI(promoted.DeepCopy(), pause.DeepCopy())
			w := startWait(t.Context(), api.client, waitOptions{condition: c.cond, unreachable: time.Hour})
			w.progressed(t, c.progress)
			api.refuse(c.resource, c.err)
			err := w.result(t)
			if exitCode(err, true) != ExitFailed || err == nil || !strings.HasPrefix(err.Error(), c.want) {
				t.Errorf("wait: %v (exit %d),\nwant exit 1: %s...", err, exitCode(err, true), c.want)
			}
		})
	}
}

// A wait for latched can do without Promotions: their refusal mid-wait
// drops them, with a warning as at start, and the wait goes on to its end.
func TestWaitGoesOnWithoutPromotionsRefusedMidWait(t *testing.T) {
	t.Parallel()
	api := newRefusingAPI(prodStage(kargoView{last: promo1, lastPhase: promotionSucceeded}, cycleOf(promo1, latch.PhasePromoted, nil)))
	w := startWait(t.Context(), api.client, waitOptions{condition: "latched", unreachable: time.Hour})
	w.progressed(t, "is Promoted")
	api.refuse("promotions", apierrors.NewForbidden(stageResource("promotions"), "", errors.New("RBAC: role revoked")))
	w.progressed(t, "warning: cannot watch promotions in namespace project (promotions.kargo.akuity.io is forbidden: RBAC: role revoked); "+
		"it knows only the promotions the Stage shows (running or last)\n")
	updateStage(t, api.client, prodStage(kargoView{last: promo1, lastPhase: promotionSucceeded}, cycleOf(promo1, latch.PhaseLatched, nil)))
	if err := w.result(t); err != nil {
		t.Fatalf("wait: %v; stderr:\n%s", err, w.stderr.String())
	}
	if n := strings.Count(w.stderr.String(), "warning: cannot watch promotions"); n != 1 {
		t.Errorf("%d warnings about promotions, want 1:\n%s", n, w.stderr.String())
	}
}

// A kube-apiserver that has just restarted may refuse for a moment (its
// authenticators and RBAC caches start): a refusal that the API server no
// longer makes when the wait reads the source again does not end it.
func TestWaitRidesOutAMomentaryRefusal(t *testing.T) {
	t.Parallel()
	api := newRefusingAPI(prodStage(kargoView{last: promo1, lastPhase: promotionSucceeded}, cycleOf(promo1, latch.PhasePromoted, nil)))
	w := startWait(t.Context(), api.client, waitOptions{condition: "latched", unreachable: time.Hour})
	w.progressed(t, "is Promoted")
	api.refuse("*", apierrors.NewUnauthorized("authenticator not ready"))
	waitRefused(t, api)
	api.refuse("*", nil)
	updateStage(t, api.client, prodStage(kargoView{last: promo1, lastPhase: promotionSucceeded}, cycleOf(promo1, latch.PhaseLatched, nil)))
	if err := w.result(t); err != nil {
		t.Fatalf("wait: %v, want it to ride a momentary refusal out", err)
	}
}

// waitRefused waits until the fake API server has refused a request.
func waitRefused(t *testing.T, api *refusingAPI) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		api.mu.Lock()
		n := api.refusals
		api.mu.Unlock()
		if n > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no request was refused")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
