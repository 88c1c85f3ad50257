package cli

import (
	"context"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// freightSources watch, for a wait for verified, the Freight of the cycle
// it judges, each by name (a field selector): a project may hold thousands
// of Freight, and a pipeline's right to read Freight may name only its own
// (RBAC resourceNames allow a list and watch selected by name).
type freightSources struct {
	byName map[string]*source
	// off is set once Freight cannot be read (a refusal: actOnRefusals):
	// only kargo-latch's marks count then.
	off bool
}

// followFreight watches the Freight of the cycle the wait judges now, and
// stops watching any other.
func (w *waiter) followFreight(ctx context.Context) {
	f := &w.freight
	if w.cond != forVerified || f.off {
		return
	}
	want := cycleFreight(w.stageObject())
	for name, s := range f.byName {
		if !slices.Contains(want, name) {
			s.stop()
			delete(f.byName, name)
		}
	}
	for _, name := range want {
		if f.byName[name] != nil {
			continue
		}
		s, err := w.watching(kargo.FreightsResource, byName(name), false).start(ctx)
		if err != nil {
			w.freightOff(err)
			return
		}
		if f.byName == nil {
			f.byName = map[string]*source{}
		}
		f.byName[name] = s
	}
}

// freightOff goes on without reading Freight, and says so.
func (w *waiter) freightOff(err error) {
	w.stopFreight()
	w.freight.off = true
	fmt.Fprintf(w.stderr, "warning: cannot watch freights in namespace %s (%v); it counts only the Freight kargo-latch marked verified\n", w.ns, err)
}

func (w *waiter) stopFreight() {
	for name, s := range w.freight.byName {
		s.stop()
		delete(w.freight.byName, name)
	}
}

// cycleFreight names the Freight of the cycle the Stage's record follows,
// once Kargo shows it as the Stage's current Freight; none before.
func cycleFreight(u *unstructured.Unstructured) []string {
	if u == nil {
		return nil
	}
	rec, err := latch.Decode(u.GetAnnotations()[kargo.StateAnnotation])
	st := kargo.StatusFromUnstructured(u)
	if err != nil || st == nil || st.FreightID == "" || st.FreightID != rec.FreightID {
		return nil
	}
	return st.FreightNames
}

// verifiedIn reads, from the watched Freight, when each was verified in
// stage; nil when Freight are not read.
func (f *freightSources) verifiedIn(ns, stage string) func(freight string) (*time.Time, bool) {
	if f.off {
		return nil
	}
	return func(freight string) (*time.Time, bool) {
		u := f.byName[freight].get(ns, freight)
		if u == nil {
			return nil, false
		}
		return freightVerifiedAt(u, stage)
	}
}

// freightVerifiedAt reports whether a Freight's status.verifiedIn has
// stage, and its verifiedAt, nil when absent or unreadable.
func freightVerifiedAt(u *unstructured.Unstructured, stage string) (*time.Time, bool) {
	entry, found, _ := unstructured.NestedMap(u.Object, "status", "verifiedIn", stage)
	if !found {
		return nil, false
	}
	s, _ := entry["verifiedAt"].(string)
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return nil, true
	}
	return &t, true
}
