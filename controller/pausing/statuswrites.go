package pausing

import (
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
)

// What an operator remembers of its writes to a StagePause's status, per
// pause and for its leadership term, in memory only; a new term starts
// afresh. The term is an opaque token (StatusWriter.Term), compared with ==.
//
//   - Whether it removed the key it supersedes (supersededKey): it does so
//     once per term. The "*" and "default" operators take the same Lease,
//     so one normally runs after the other, and the successor's removal
//     drops its predecessor's count. When both lead at once (without
//     leader election, or with Leases of their own), each removes the
//     other's key once and then keeps it, so they settle at
//     {"*": N, default: M} instead of removing each other's key forever.
//   - Its last write, to tell when another writer undoes it. An operator
//     built before status.shards writes status.shards: null whenever it
//     writes (unconditionally), and so removes this operator's key each
//     time: left alone, the two rewrite the status as fast as the API
//     server answers, for as long as both run. A few undos are let be (a
//     successor's removal, a person's); after undosLetBe quick ones in a
//     row the operator holds its writes of that pause back, longer each
//     time up to maxUndoneBackoff, and says so (a PauseStatusContested
//     Warning on the pause, kargo_latch_pause_status_contested_total).

// An undo counts when it comes within undoWindow of the write it undid.
// undosLetBe quick undos in a row are rewritten at once; each further one
// holds the writes back for firstUndoneBackoff, doubled each time up to
// maxUndoneBackoff. A write that stands for undoWindow ends the run.
const (
	undoWindow         = time.Minute
	undosLetBe         = 2
	firstUndoneBackoff = 10 * time.Second
	maxUndoneBackoff   = 5 * time.Minute
)

// pauseWriteLog holds the pauseWrites of the current leadership term.
type pauseWriteLog struct {
	mu   sync.Mutex
	term any
	m    map[cache.ObjectName]*pauseWrites
}

// pauseWrites is what the operator remembers of its writes to one pause.
type pauseWrites struct {
	uid               types.UID
	removedSuperseded bool
	last              *statusWrite // nil when none is to be checked
	undos             int          // quick undos in a row
	heldUntil         time.Time    // no write before
}

// statusWrite is one write of the operator's key of status.shards: from
// the resourceVersion it was conditional on, at when, the key's count
// (kept: present at all). The write's own version follows from at once.
type statusWrite struct {
	from  string
	at    time.Time
	count int32
	kept  bool
}

// entry returns p's writes in term, made afresh for a new term or a new
// pause of the same name. The caller holds l.mu.
func (l *pauseWriteLog) entry(term any, p *v1alpha1.StagePause) *pauseWrites {
	if l.term != term || l.m == nil {
		l.term, l.m = term, map[cache.ObjectName]*pauseWrites{}
	}
	key := cache.NewObjectName(p.Namespace, p.Name)
	w := l.m[key]
	if w == nil || w.uid != p.UID {
		w = &pauseWrites{uid: p.UID}
		l.m[key] = w
	}
	return w
}

// forget drops what is remembered of a pause that is gone.
func (l *pauseWriteLog) forget(key cache.ObjectName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, key)
}

// supersededToRemove is the key this operator (counting under key) removes
// besides its own from p's status: supersededKey, until it did once in
// term; else "".
func (l *pauseWriteLog) supersededToRemove(term any, p *v1alpha1.StagePause, key string) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.entry(term, p).removedSuperseded {
		return ""
	}
	return supersededKey(key)
}

// observe looks at p for an undo of this operator's last write of key, at
// now. It returns how long writes are held back from now (0: not held)
// and, when this undo starts or extends a hold, the run of undos so far
// (0 otherwise).
func (l *pauseWriteLog) observe(term any, p *v1alpha1.StagePause, key string, now time.Time) (held time.Duration, undos int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.entry(term, p)
	if last := w.last; last != nil && p.ResourceVersion != last.from {
		// The cache shows the write, or a later version: any other count
		// under key is another writer's.
		n, present := p.Status.Shards[key]
		switch {
		case present == last.kept && n == last.count:
			if now.Sub(last.at) >= undoWindow {
				w.undos = 0
			}
		case now.Sub(last.at) > undoWindow:
			w.last, w.undos = nil, 0
		default:
			w.last = nil
			w.undos++
			if w.undos > undosLetBe {
				w.heldUntil = now.Add(undoneBackoff(w.undos - undosLetBe))
				undos = w.undos
			}
		}
	}
	return max(w.heldUntil.Sub(now), 0), undos
}

// undoneBackoff is the hold after the nth undo beyond those let be.
func undoneBackoff(n int) time.Duration {
	d := firstUndoneBackoff
	for ; n > 1 && d < maxUndoneBackoff; n-- {
		d *= 2
	}
	return min(d, maxUndoneBackoff)
}

// wrote remembers a write of want to p's status made at now: the key's
// count, and whether it removed the superseded key removed.
func (l *pauseWriteLog) wrote(term any, p *v1alpha1.StagePause, key string, want *v1alpha1.StagePauseStatus, removed string, now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.entry(term, p)
	n, kept := want.Shards[key]
	w.last = &statusWrite{from: p.ResourceVersion, at: now, count: n, kept: kept}
	if _, had := p.Status.Shards[removed]; removed != "" && had {
		w.removedSuperseded = true
	}
}

// heldUntil is when writes of the pause key may resume; zero when none
// are held back.
func (l *pauseWriteLog) heldUntil(key cache.ObjectName) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w := l.m[key]; w != nil {
		return w.heldUntil
	}
	return time.Time{}
}
