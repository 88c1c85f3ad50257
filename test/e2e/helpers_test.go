package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

const waitLimit = 30 * time.Second

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// newProject creates a namespace of its own for one test.
func (w *world) newProject(t *testing.T) string {
	t.Helper()
	name := strings.ToLower(regexp.MustCompile(`[^a-zA-Z0-9]+`).ReplaceAllString(t.Name(), "-"))
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	name = strings.Trim(name[:min(len(name), 50)], "-") + "-" + hex.EncodeToString(b)
	_, err := w.kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
		// As Kargo's management controller labels a project's namespace.
		Name: name, Labels: map[string]string{"kargo.akuity.io/project": "true"},
	}}, metav1.CreateOptions{})
	must(t, err)
	return name
}

func (w *world) createStage(t *testing.T, ns, name string, annotations map[string]string, opts ...driver.StageOption) *driver.Stage {
	t.Helper()
	s, err := w.kargo.CreateStage(context.Background(), ns, name, annotations, opts...)
	must(t, err)
	return s
}

// latchedStages creates a Stage for each name and takes each through a
// promotion to Latched.
func (w *world) latchedStages(t *testing.T, ns string, names ...string) []*driver.Stage {
	t.Helper()
	stages := make([]*driver.Stage, len(names))
	for i, name := range names {
		stages[i] = w.createStage(t, ns, name, nil)
		promoteAndLatch(t, stages[i])
	}
	return stages
}

// stageRecord reads the latch record on the server.
func stageRecord(t *testing.T, s *driver.Stage) latch.Record {
	t.Helper()
	u, err := s.Get(context.Background())
	must(t, err)
	r, err := latch.Decode(u.GetAnnotations()[api.StateAnnotation])
	if err != nil {
		t.Fatalf("stage %s has an invalid record: %v", s.Name, err)
	}
	return r
}

// waitFor polls cond until it holds or waitLimit passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitLong(t, what, waitLimit, cond)
}

// waitLong is waitFor with another limit, for what takes longer, such as
// the work of another controller.
func waitLong(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	if err := (poller{limit: limit, every: 25 * time.Millisecond}).wait(what, func() (bool, error) { return cond(), nil }); err != nil {
		t.Fatal(err)
	}
}

// poller waits for a condition every so often, for at most limit. Its
// conditions and its result are errors, not test failures, so that it
// serves code outside the test's goroutine, where t.Fatal must not be
// called.
type poller struct{ limit, every time.Duration }

func (p poller) wait(what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(p.limit)
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out after %v waiting for %s", p.limit, what)
		}
		time.Sleep(p.every)
	}
}

// poll is waitFor for code that runs outside the test's goroutine: it
// returns an error instead of failing the test.
func poll(what string, cond func() (bool, error)) error {
	return poller{limit: waitLimit, every: 25 * time.Millisecond}.wait(what, cond)
}

// readRecord is stageRecord returning its error.
func readRecord(s *driver.Stage) (latch.Record, error) {
	u, err := s.Get(context.Background())
	if err != nil {
		return latch.Record{}, err
	}
	return latch.Decode(u.GetAnnotations()[api.StateAnnotation])
}

// pollPhase is waitPhase returning its error.
func pollPhase(s *driver.Stage, phase latch.Phase) (latch.Record, error) {
	var r latch.Record
	err := poll("stage "+s.Name+" to be "+string(phase), func() (bool, error) {
		var err error
		r, err = readRecord(s)
		return r.Phase == phase, err
	})
	return r, err
}

func waitPhase(t *testing.T, s *driver.Stage, phase latch.Phase) latch.Record {
	t.Helper()
	r, err := pollPhase(s, phase)
	must(t, err)
	return r
}

// stageEvents lists the Events about one Stage, by reason.
func (w *world) stageEvents(t *testing.T, s *driver.Stage) map[string][]corev1.Event {
	t.Helper()
	list, err := w.kube.CoreV1().Events(s.Namespace).List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + s.Name + ",involvedObject.kind=Stage",
	})
	must(t, err)
	byReason := map[string][]corev1.Event{}
	for _, e := range list.Items {
		byReason[e.Reason] = append(byReason[e.Reason], e)
	}
	return byReason
}

// eventCount counts Events of a reason, including repeats the recorder
// folded into one Event's count.
func (w *world) eventCount(t *testing.T, s *driver.Stage, reason string) int {
	t.Helper()
	n := 0
	for _, e := range w.stageEvents(t, s)[reason] {
		n += max(1, int(e.Count))
	}
	return n
}

func waitEvent(t *testing.T, s *driver.Stage, reason string) corev1.Event {
	t.Helper()
	var ev corev1.Event
	waitFor(t, "a "+reason+" Event on "+s.Name, func() bool {
		evs := env.stageEvents(t, s)[reason]
		if len(evs) > 0 {
			ev = evs[0]
		}
		return len(evs) > 0
	})
	return ev
}

func fastSettings() latch.Settings {
	return latch.Settings{LatchDeadline: time.Minute, DegradedGrace: time.Minute}
}
