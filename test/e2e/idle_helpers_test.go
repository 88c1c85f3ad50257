package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

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
