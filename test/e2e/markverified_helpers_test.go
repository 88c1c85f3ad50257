package e2e

import (
	"encoding/json"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

var markVerified = map[string]string{api.MarkVerifiedAnnotation: "true"}

// appsAB makes a Stage whose promotion step updates the Argo CD
// Applications a and b, so that its health check reports them: the Stages
// of latchByApps, flapUntilLatched and runMarkCycle.
var appsAB = driver.WithApps("a", "b")

// app is an Argo CD Application in the state Kargo's health check reports.
func app(name, health string) driver.App {
	return driver.App{Name: name, Health: health, Sync: "Synced"}
}

// promote plays a successful promotion of new Freight, waits for the
// operator to begin its cycle, and returns the Freight's name. Waiting
// matters: until then the record is the previous cycle's.
func promote(t *testing.T, s *driver.Stage) string {
	t.Helper()
	name, err := promoteFreight(s)
	must(t, err)
	must(t, poll("the cycle of Freight "+name+" on "+s.Name, func() (bool, error) {
		r, err := readRecord(s)
		return r.Freight == name && r.Phase == latch.PhasePromoted, err
	}))
	return name
}

// promoteFreight plays a successful promotion of new Freight and returns
// the Freight's name.
func promoteFreight(s *driver.Stage) (string, error) {
	if _, err := s.StartPromotion(ctx); err != nil {
		return "", err
	}
	if _, err := s.FinishPromotion(ctx, "Succeeded"); err != nil {
		return "", err
	}
	return s.CurrentFreight(ctx)
}

// latchByApps plays the problem kargo-latch exists for: a successful
// promotion, then two Applications Healthy one after the other, never
// together, the Stage Progressing throughout. It waits for the latch and
// returns the record and the Freight.
func latchByApps(t *testing.T, s *driver.Stage) (latch.Record, string) {
	t.Helper()
	freight := promote(t, s)
	return flapUntilLatched(t, s), freight
}

// flapUntilLatched is latchByApps after the promotion.
func flapUntilLatched(t *testing.T, s *driver.Stage) latch.Record {
	t.Helper()
	must(t, s.SetAppsHealth(ctx, kargo.HealthProgressing, app("a", "Healthy"), app("b", "Progressing")))
	waitFor(t, "App a to count as Healthy on "+s.Name, func() bool {
		_, seen := stageRecord(t, s).AppsHealthy["argocd/a"]
		return seen
	})
	must(t, s.SetAppsHealth(ctx, kargo.HealthProgressing, app("a", "Progressing"), app("b", "Healthy")))
	return waitPhase(t, s, latch.PhaseLatched)
}

// rfc3339 is a time as Kargo and kargo-latch write verifiedAt.
func rfc3339(at time.Time) string { return at.UTC().Format(time.RFC3339) }

// freightOnServer reads a Freight as it is on the server.
func freightOnServer(t *testing.T, ns, name string) *unstructured.Unstructured {
	t.Helper()
	f, err := env.kargo.Freight(ctx, ns, name)
	must(t, err)
	return f
}

// verifiedIn is a Freight's status.verifiedIn.
func verifiedIn(f *unstructured.Unstructured) map[string]any {
	m, _, _ := unstructured.NestedMap(f.Object, "status", "verifiedIn")
	return m
}

// verifiedAt is status.verifiedIn.<stage>.verifiedAt of a Freight, and
// whether the Stage has an entry at all.
func verifiedAt(f *unstructured.Unstructured, stage string) (string, bool) {
	entry, ok := verifiedIn(f)[stage].(map[string]any)
	if !ok {
		return "", false
	}
	at, _ := entry["verifiedAt"].(string)
	return at, true
}

// waitVerified waits for the Freight to be verified in the Stage and
// returns verifiedAt.
func waitVerified(t *testing.T, s *driver.Stage, name string) string {
	t.Helper()
	var at string
	waitFor(t, "Freight "+name+" to be verified in "+s.Name, func() bool {
		var ok bool
		at, ok = verifiedAt(freightOnServer(t, s.Namespace, name), s.Name)
		return ok
	})
	return at
}

// assertNotVerified checks that the Freight has no mark for the Stage,
// that no FreightVerified Event was made, and that nothing was counted.
func assertNotVerified(t *testing.T, op *operator, s *driver.Stage, name, when string) {
	t.Helper()
	if at, ok := verifiedAt(freightOnServer(t, s.Namespace, name), s.Name); ok {
		t.Errorf("%s: Freight %s was marked verified in %s at %s, want no mark", when, name, s.Name, at)
	}
	if n := env.eventCount(t, s, api.ReasonFreightVerified); n != 0 {
		t.Errorf("%s: %d FreightVerified Events on %s, want none", when, n, s.Name)
	}
	if n := op.metric("kargo_latch_freight_verified_total", "stage", s.Name); n != 0 {
		t.Errorf("%s: kargo_latch_freight_verified_total{stage=%q} = %v, want 0", when, s.Name, n)
	}
}

// patchStageStatus writes a Stage's status as Kargo's controller does (a
// JSON merge patch of the status subresource), for shapes the driver does
// not make.
func patchStageStatus(s *driver.Stage, status map[string]any) error {
	body, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	_, err = env.dyn.Resource(kargo.StagesResource).Namespace(s.Namespace).
		Patch(ctx, s.Name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: driver.FieldManager}, "status")
	return err
}

// patchFreightStatus writes a Freight's status as Kargo does, for keys the
// driver does not write (approvedFor).
func patchFreightStatus(ns, name string, status map[string]any) error {
	body, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	_, err = env.dyn.Resource(kargo.FreightsResource).Namespace(ns).
		Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: driver.FieldManager}, "status")
	return err
}

// markedCycle is one cycle of TestMarkVerifiedExactlyOnceAcrossKills.
type markedCycle struct {
	freight   string
	latchedAt time.Time
}

// runMarkCycle plays one promotion to a latch, by the Applications or by
// the Stage's health, and waits for its Freight to be marked and the record
// to say so. It runs outside the test's goroutine and returns its errors.
func runMarkCycle(s *driver.Stage, byApps bool) (markedCycle, error) {
	name, err := promoteFreight(s)
	if err != nil {
		return markedCycle{}, err
	}
	if err := poll("the cycle of "+name, func() (bool, error) {
		r, err := readRecord(s)
		return r.Freight == name && r.Phase == latch.PhasePromoted, err
	}); err != nil {
		return markedCycle{}, err
	}
	if byApps {
		if err := s.SetAppsHealth(ctx, "Progressing", app("a", "Healthy"), app("b", "Progressing")); err != nil {
			return markedCycle{}, err
		}
		if err := poll("App a to count as Healthy", func() (bool, error) {
			r, err := readRecord(s)
			_, seen := r.AppsHealthy["argocd/a"]
			return seen, err
		}); err != nil {
			return markedCycle{}, err
		}
		err = s.SetAppsHealth(ctx, "Progressing", app("a", "Progressing"), app("b", "Healthy"))
	} else {
		if err := s.SetHealth(ctx, "Progressing"); err != nil {
			return markedCycle{}, err
		}
		err = s.SetHealth(ctx, "Healthy")
	}
	if err != nil {
		return markedCycle{}, err
	}
	var c markedCycle
	err = poll("the mark of "+name, func() (bool, error) {
		f, err := env.kargo.Freight(ctx, s.Namespace, name)
		if err != nil {
			return false, err
		}
		r, err := readRecord(s)
		if err != nil {
			return false, err
		}
		_, marked := verifiedAt(f, s.Name)
		if !marked || r.Phase != latch.PhaseLatched || !slices.Contains(r.Marked, name) {
			return false, nil
		}
		c = markedCycle{freight: name, latchedAt: *r.LatchedAt}
		return true, nil
	})
	return c, err
}

// markWatch records, through a watch, every value each Freight's
// status.verifiedIn.<stage>.verifiedAt takes.
type markWatch struct {
	mu   sync.Mutex
	seen map[string][]string // "freight/stage" -> distinct values in order
}

func watchMarks(t *testing.T, ns string) *markWatch {
	t.Helper()
	w := &markWatch{seen: map[string][]string{}}
	factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(env.dyn, 0, ns, nil)
	informer := factory.ForResource(kargo.FreightsResource).Informer()
	observe := func(obj any) {
		f, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		for stage := range verifiedIn(f) {
			at, _ := verifiedAt(f, stage)
			key := f.GetName() + "/" + stage
			if v := w.seen[key]; len(v) == 0 || v[len(v)-1] != at {
				w.seen[key] = append(v, at)
			}
		}
	}
	_, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    observe,
		UpdateFunc: func(_, obj any) { observe(obj) },
	})
	must(t, err)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	factory.Start(stop)
	factory.WaitForCacheSync(stop)
	return w
}

func (w *markWatch) values(freight, stage string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.seen[freight+"/"+stage])
}

// assertMarks checks that the operator reported want marks on the Stage:
// as many FreightVerified Events, and its counter.
func assertMarks(t *testing.T, op *operator, s *driver.Stage, want int) {
	t.Helper()
	if n := env.eventCount(t, s, api.ReasonFreightVerified); n != want {
		t.Errorf("%d FreightVerified Events, want %d", n, want)
	}
	if n := op.metric("kargo_latch_freight_verified_total", "project", s.Namespace, "stage", s.Name); n != float64(want) {
		t.Errorf("kargo_latch_freight_verified_total = %v, want %d", n, want)
	}
}
