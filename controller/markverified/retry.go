package markverified

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// markRetryAfter is how long a Stage waits to try marking again after the
// operator was refused the right: an administrator may install the
// mark-verified component meanwhile, and there is no event to wait for.
// Other errors (an outage) are retried sooner, with backoff up to it; a
// conflict with Kargo writing the Freight is retried at once (markPass).
const (
	markRetryAfter      = time.Minute
	markErrorRetryFirst = 2 * time.Second
)

// Memo is what a replica remembers of a Stage's marks, in memory only.
type Memo struct {
	// retryAt holds marking in heldCycle back after a failed try;
	// markedCycle is the cycle whose marks this replica stored;
	// forbiddenCycle is the cycle whose refusal was reported.
	retryAt        time.Time
	heldCycle      string
	markedCycle    string
	forbiddenCycle string
	errors         int // marking errors in a row, for the backoff
}

// MayTry reports whether this replica should try to mark the Freight of
// cycle now: not when it stored the marks of that cycle itself (its cache
// may not show them yet, and reading to find out costs three requests),
// nor while a failed try holds the cycle back. A new cycle is tried at once.
func (m *Memo) MayTry(cycle string, now time.Time) bool {
	held := m.heldCycle == cycle && now.Before(m.retryAt)
	return cycle != m.markedCycle && !held
}

// RetryIn says when a Stage whose marking was refused should try again;
// zero when it need not.
func (m *Memo) RetryIn(now time.Time) time.Duration {
	if now.Before(m.retryAt) {
		return m.retryAt.Sub(now)
	}
	return 0
}

// Marked notes a mark that succeeded: the backoff starts over.
func (m *Memo) Marked() { m.errors = 0 }

// Stored notes that the marks of cycle are stored in the record.
func (m *Memo) Stored(cycle string) { m.markedCycle = cycle }

// Failed holds further tries of this cycle back: a refused right (the
// install lacks the mark-verified component) for markRetryAfter, counted
// every time and reported once per cycle; any other error for a backoff
// that starts at markErrorRetryFirst.
func (mk *Marker) Failed(ctx context.Context, stage *kargo.Stage, m *Memo, rec latch.Record, err error, now time.Time) {
	m.heldCycle = rec.Cycle()
	if !apierrors.IsForbidden(err) {
		wait := min(markRetryAfter, markErrorRetryFirst<<min(m.errors, 5))
		m.errors++
		m.retryAt = now.Add(wait)
		klog.FromContext(ctx).Error(err, "Marking Freight verified failed; trying again", "after", wait)
		return
	}
	// The install lacks the mark-verified component.
	mk.metrics.MarkVerifiedErrors.WithLabelValues(stage.Namespace, stage.Name).Inc()
	m.retryAt = now.Add(markRetryAfter)
	if m.forbiddenCycle != rec.Cycle() {
		m.forbiddenCycle = rec.Cycle()
		mk.report.Warn(stage, api.ReasonMarkVerifiedForbidden,
			"mark-verified is on, but kargo-latch may not mark Freight verified (%v); install the mark-verified component (manifests/components/mark-verified) or turn %s off. The latch and pauses are not affected; kargo-latch tries again every %s",
			err, api.MarkVerifiedAnnotation, markRetryAfter)
	}
}
