package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"

	"github.com/kargo-latch/kargo-latch/controller"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/metrics"
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
	_, err := w.kube.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	must(t, err)
	return name
}

func (w *world) createStage(t *testing.T, ns, name string, annotations map[string]string) *driver.Stage {
	t.Helper()
	s, err := w.kargo.CreateStage(context.Background(), ns, name, annotations)
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

// operator is an in-process kargo-latch watching one namespace.
type operator struct {
	t       *testing.T
	cancel  context.CancelFunc
	done    chan struct{}
	patches atomic.Int64 // PATCH requests to Stages
	reg     *prometheus.Registry
}

func startOperator(t *testing.T, ns string, defaults latch.Settings) *operator {
	t.Helper()
	return startOperatorAs(t, env.operator, ns, defaults)
}

// startOperatorAs is startOperator with another identity, such as the
// operator of an install with the mark-verified component (env.marker).
func startOperatorAs(t *testing.T, identity *rest.Config, ns string, defaults latch.Settings) *operator {
	t.Helper()
	return startOperatorWith(t, identity, ns, defaults, nil)
}

// refusing is a fault that refuses the requests refuse returns an error for,
// before they reach the API server.
func refusing(refuse func(*http.Request) error) func(http.RoundTripper) http.RoundTripper {
	return func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if err := refuse(r); err != nil {
				return nil, err
			}
			return rt.RoundTrip(r)
		})
	}
}

// startOperatorWith is startOperatorAs whose requests pass through fault, a
// test's fault injection (nil for none).
// stageClient is the operator's Stage client, as main builds it.
func stageClient(t *testing.T, cfg *rest.Config) rest.Interface {
	t.Helper()
	c, err := kargo.NewStageClient(cfg)
	must(t, err)
	return c
}

func startOperatorWith(t *testing.T, identity *rest.Config, ns string, defaults latch.Settings, fault func(http.RoundTripper) http.RoundTripper) *operator {
	t.Helper()
	o := &operator{t: t, done: make(chan struct{}), reg: prometheus.NewRegistry()}
	cfg := rest.CopyConfig(identity)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		if fault != nil {
			rt = fault(rt)
		}
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPatch && strings.Contains(r.URL.Path, "/stages/") {
				o.patches.Add(1)
			}
			return rt.RoundTrip(r)
		})
	}
	c, err := controller.New(controller.Config{
		Dynamic:            dynamic.NewForConfigOrDie(cfg),
		StageClient:        stageClient(t, cfg),
		Kube:               kubernetes.NewForConfigOrDie(cfg),
		Namespaces:         []string{ns},
		Defaults:           defaults,
		Metrics:            metrics.New(o.reg, "e2e"),
		QueueMetrics:       metrics.NewWorkqueueProvider(o.reg),
		StatusMissingAfter: time.Second,
	})
	must(t, err)
	_, ctx := ktesting.NewTestContext(t)
	ctx, o.cancel = context.WithCancel(ctx)
	go func() {
		defer close(o.done)
		if err := c.Run(ctx); err != nil {
			t.Errorf("operator: %v", err)
		}
	}()
	t.Cleanup(o.stop)
	return o
}

func (o *operator) stop() {
	o.cancel()
	<-o.done
}

// metric reads one counter or gauge of the operator; of a histogram, the
// number of observations.
func (o *operator) metric(name string, labels ...string) float64 {
	var total float64
	mfs, err := o.reg.Gather()
	if err != nil {
		o.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for i := 0; i+1 < len(labels); i += 2 {
				if got[labels[i]] != labels[i+1] {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				total += m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				total += m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				total += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return total
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// stageRecord reads the latch record on the server.
func stageRecord(t *testing.T, s *driver.Stage) latch.Record {
	t.Helper()
	u, err := s.Get(context.Background())
	must(t, err)
	r, err := latch.Decode(u.GetAnnotations()[controller.StateAnnotation])
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
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", limit, what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func waitPhase(t *testing.T, s *driver.Stage, phase latch.Phase) latch.Record {
	t.Helper()
	var r latch.Record
	waitFor(t, "stage "+s.Name+" to be "+string(phase), func() bool {
		r = stageRecord(t, s)
		return r.Phase == phase
	})
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

// settle gives the operator time to act on what it has seen, for tests that
// assert that nothing happens.
func settle() { time.Sleep(1500 * time.Millisecond) }

func fastSettings() latch.Settings {
	return latch.Settings{LatchDeadline: time.Minute, DegradedGrace: time.Minute}
}
