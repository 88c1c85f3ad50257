package verification

import "time"

// Memo is what a replica remembers of a Stage's verify-on-latch between
// syncs, in memory only (kept in the controller's memo). None of it is
// needed after a restart: it keeps Warnings to one per problem, spaces out
// the retries of a refused start, and takes each step that ends a run once
// while the cache lags behind it.
type Memo struct {
	// refused is the last refused start reported (cycle and message);
	// refusedCycle's start is not tried again before retryAt, after
	// refusals refused starts of it.
	refused      string
	refusedCycle string
	retryAt      time.Time
	refusals     int
	// badRunPhase is the last run and phase Argo Rollouts does not give
	// that was reported.
	badRunPhase string
	// unavailable is the last reason reported why verify-on-latch is off
	// in the Stage's project.
	unavailable string
	// readWhileOff names the run of a failed cycle that was read live while
	// verify-on-latch was off, and found out of Kargo's lookup, ended,
	// gone or unreadable: it is not read again (ObserveWhileOff).
	readWhileOff string
	// ended names the steps ("<action>/<run>") this replica took lately to
	// end runs, so that each is taken once: the cache may not show a
	// patch yet when the next sync comes.
	ended []string
}

// maxEnded bounds Memo.ended: a cycle ends a run or two, and an old step
// forgotten costs at most one harmless repeat (both steps are idempotent).
const maxEnded = 16

// RetryIn is when a refused start of cycle's run is tried again; zero when
// none waits.
func (m *Memo) RetryIn(cycle string, now time.Time) time.Duration {
	if m.refusedCycle == "" || m.refusedCycle != cycle || !now.Before(m.retryAt) {
		return 0
	}
	return m.retryAt.Sub(now)
}

// retryFirst is how long a refused start of a cycle's run (a template
// missing, an argument kargo-latch cannot evaluate, a right missing) first
// waits before it is tried again: the Stage's fix may be in a template,
// whose changes bring no event. Each further refusal in the cycle doubles
// the wait, up to retryMax: a start costs about five live reads.
const (
	retryFirst = time.Minute
	retryMax   = 30 * time.Minute
)

// backoff is the wait after the n-th refused start of a cycle.
func backoff(n int) time.Duration {
	d := retryFirst
	for i := 1; i < n && d < retryMax; i++ {
		d *= 2
	}
	return min(d, retryMax)
}

// refusedAgain counts a refused start of cycle's run at now, and holds the
// next try back for the backoff.
func (m *Memo) refusedAgain(cycle string, now time.Time) {
	if m.refusedCycle != cycle {
		m.refusals = 0
	}
	m.refusals++
	m.refusedCycle, m.retryAt = cycle, now.Add(backoff(m.refusals))
}

// warnOnce remembers value in last and reports whether it is a new problem
// to report: not empty, and not the one reported last time.
func warnOnce(last *string, value string) bool {
	if value == *last {
		return false
	}
	*last = value
	return value != ""
}
