package e2e

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2/ktesting"

	"github.com/kargo-latch/kargo-latch/api"
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

// stageClient is the operator's Stage client, as main builds it.
func stageClient(t *testing.T, cfg *rest.Config) rest.Interface {
	t.Helper()
	c, err := kargo.NewStageClient(cfg)
	must(t, err)
	return c
}

// startOperatorWith is startOperatorAs whose requests pass through fault, a
// test's fault injection (nil for none).
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

// work is what an operator reports of its work in its metrics: the Stage
// syncs it finished, and the items its work queues took in and handed out
// finished. A queue counts an item in once however often it is added before
// it is handled, and out once handled: in equals out exactly when nothing is
// queued or being synced. (A retry, or a time-based transition, waits
// outside the queue until it is due.)
type work struct{ syncs, queuedIn, queuedOut float64 }

// syncsMetric counts the operator's syncs of a Stage (one observation each).
const syncsMetric = "kargo_latch_reconcile_duration_seconds"

// workFrom reads work from an operator's metrics, each summed over its
// labels (the Stage queue and the StagePause queue together).
func workFrom(metric func(name string) float64) work {
	return work{
		syncs:     metric(syncsMetric),
		queuedIn:  metric("kargo_latch_workqueue_adds_total"),
		queuedOut: metric("kargo_latch_workqueue_work_duration_seconds"),
	}
}

// A meter reads an operator's work: an in-process operator's registry, or
// an operator process's /metrics (metricsAt), which fails while the
// process is down or starting.
type meter interface{ work() (work, error) }

func (o *operator) work() (work, error) {
	return workFrom(func(name string) float64 { return o.metric(name) }), nil
}

// idleMoment is how long an operator must stay idle to count as idle: a
// sync retried after a write conflict waits some milliseconds outside the
// queue, and a watch event is delivered within the moment.
const idleMoment = 300 * time.Millisecond

// waitIdle waits until the operator has finished at least minSyncs Stage
// syncs and has nothing queued or being synced, with its work unchanged
// for idleMoment. Every change it was told of before then is handled.
func waitIdle(t *testing.T, m meter, minSyncs float64) {
	t.Helper()
	last, since := work{syncs: -1}, time.Now() // no read is like this one
	waitFor(t, "the operator to be idle", func() bool {
		w, err := m.work()
		if err != nil || w.syncs < minSyncs || w.queuedIn != w.queuedOut || w != last {
			last, since = w, time.Now()
			return false
		}
		return time.Since(since) >= idleMoment
	})
}

// waitSees makes a change with write and waits until the operator has
// synced after it. The operator being idle before the change, that sync
// read the change (or a later one). write must change something the
// operator reads, or nothing is synced: per-App health, for one, is read
// only while a cycle waits for its latch; nudge changes what it reads and
// nothing it judges.
func waitSees(t *testing.T, m meter, what string, write func() error) {
	t.Helper()
	waitIdle(t, m, 0)
	w, err := m.work()
	must(t, err)
	must(t, write())
	waitFor(t, "the operator to sync after "+what, func() bool {
		now, err := m.work()
		return err == nil && now.syncs > w.syncs
	})
}

// waitProcessed is waitSees that then waits until the operator is idle
// again, with all the change set off handled. A check that the change made
// no difference is then a check of what the operator did with it, not of
// how soon it looked: the way to assert that nothing happens.
func waitProcessed(t *testing.T, m meter, what string, write func() error) {
	t.Helper()
	waitSees(t, m, what, write)
	waitIdle(t, m, 0)
}

// idle waits until the operator has nothing queued or in flight (waitIdle).
func (o *operator) idle(t *testing.T) {
	t.Helper()
	waitIdle(t, o, 0)
}

// sees makes a change and waits for a sync after it (waitSees).
func (o *operator) sees(t *testing.T, what string, write func() error) {
	t.Helper()
	waitSees(t, o, what, write)
}

// processed makes a change and waits until the operator has handled it
// (waitProcessed).
func (o *operator) processed(t *testing.T, what string, write func() error) {
	t.Helper()
	waitProcessed(t, o, what, write)
}

// nudgeAnnotation is an annotation of kargo-latch's prefix that is no
// setting: the operator's cache keeps it, and its settings ignore it.
const nudgeAnnotation = kargo.OwnPrefix + "e2e-nudge"

// nudge returns a write that changes what the operator reads of a Stage
// and nothing it judges. The sync it wakes judges the Stage as it is then,
// time included: after a deadline or a grace, proof that the operator
// looked at the Stage once the time had passed.
func nudge(s *driver.Stage) func() error {
	return func() error {
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, nudgeAnnotation, time.Now().Format(time.RFC3339Nano))
		_, err := env.dyn.Resource(kargo.StagesResource).Namespace(s.Namespace).
			Patch(context.Background(), s.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		return err
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

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
