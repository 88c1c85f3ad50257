package queue

import (
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// Lanes is the store of a Queue's waiting keys, in two FIFO lanes: keys
// marked urgent are handed out before the others. A failure must not wait
// behind the health flaps of a thousand busy Stages, each of which only
// confirms what the operator already knows: under churn, a plain FIFO put
// a failure's sync behind every flap queued before it.
//
// The workqueue around it keeps everything else: a key is queued once, is
// never handed to two workers at once, and one added while it is being
// synced waits until that sync is done, then takes the lane its mark gives
// it. Only the order changes, so a wrongly marked key costs others a little
// latency and nothing more; and after maxUrgentStreak urgent keys in a row
// a waiting plain key goes, so that a storm of marks cannot starve the rest.
//
// The workqueue calls Touch, Push, Len and Pop under its own lock; Mark,
// MarkDueIn and Take come from other goroutines, so Lanes has a lock of
// its own, always taken after the workqueue's, and never calls out.
type Lanes struct {
	clock clock.PassiveClock

	mu sync.Mutex
	// urgent and plain hold entries in arrival order. A key moved to the
	// urgent lane by Mark or Touch leaves a stale entry in the plain one:
	// in gives the lane and the entry each queued key really has, and Pop
	// drops the rest.
	urgent, plain []entry
	in            map[cache.ObjectName]entry
	seq           uint64
	queued        [urgentLane + 1]int // live entries by lane
	streak        int                 // urgent keys handed out in a row while plain ones waited
	// marked is when each key was marked urgent, until it is handed out;
	// due is when a key becomes urgent (a transition that falls due then);
	// handed is the mark's time of a key handed out since, until Take.
	marked, due, handed map[cache.ObjectName]time.Time
}

type lane uint8

const (
	plainLane lane = iota + 1
	urgentLane
)

type entry struct {
	key  cache.ObjectName
	seq  uint64
	lane lane
}

// maxUrgentStreak is how many urgent keys go in a row while plain keys wait.
const maxUrgentStreak = 16

// NewLanes returns empty lanes; clk times the marks.
func NewLanes(clk clock.PassiveClock) *Lanes {
	return &Lanes{clock: clk, in: map[cache.ObjectName]entry{},
		marked: map[cache.ObjectName]time.Time{}, due: map[cache.ObjectName]time.Time{}, handed: map[cache.ObjectName]time.Time{}}
}

// Mark makes key urgent: queued now or on its next Add, it goes before the
// keys that are not. Mark it before adding it, so that the Add cannot find
// it unmarked. A key marked twice before it is handed out keeps its first
// mark's time.
func (l *Lanes) Mark(key cache.ObjectName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.marked[key]; !ok {
		l.marked[key] = l.clock.Now()
	}
	l.promote(key)
}

// MarkDueIn makes key urgent from d on: a transition falls due then, and
// the key's timed Add (AddAfter) takes the urgent lane. An earlier due time
// already set stands.
func (l *Lanes) MarkDueIn(key cache.ObjectName, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	at := now.Add(d)
	// An earlier due time still ahead stands; one already past has been
	// served by a hand-out (or is about to be) and gives way.
	if was, ok := l.due[key]; !ok || at.Before(was) || !was.After(now) {
		l.due[key] = at
	}
}

// Remark marks key urgent again for its retry: an urgent sync that failed
// keeps its place. The retry's urgency counts from when it is queued, not
// from the first mark, so that the wait measured is the queue's, not the
// backoff's.
func (l *Lanes) Remark(key cache.ObjectName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.marked[key]; !ok {
		l.marked[key] = time.Time{} // stamped when queued (stamp)
	}
	l.promote(key)
}

// stamp gives a key re-marked by Remark the time it is queued at.
func (l *Lanes) stamp(key cache.ObjectName) {
	if at, ok := l.marked[key]; ok && at.IsZero() {
		l.marked[key] = l.clock.Now()
	}
}

// Take reports when key, just handed out, became urgent, if it was; the
// mark is spent.
func (l *Lanes) Take(key cache.ObjectName) (since time.Time, urgent bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	since, urgent = l.handed[key]
	delete(l.handed, key)
	return since, urgent
}

// Touch is the workqueue's hook for a key added again while it waits: a
// mark made, or fallen due, since it was queued moves it up.
func (l *Lanes) Touch(key cache.ObjectName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.promote(key)
}

// Push queues key in the lane its mark gives it.
func (l *Lanes) Push(key cache.ObjectName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	which := plainLane
	if _, urgent := l.urgentSince(key); urgent {
		which = urgentLane
		l.stamp(key)
	}
	l.enqueue(key, which)
}

// Len is how many keys are queued, stale entries not counted.
func (l *Lanes) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.in)
}

// Pop hands out the oldest urgent key, else the oldest plain one; but a
// plain key after maxUrgentStreak urgent ones while it waited. The
// workqueue calls it only when Len is positive.
func (l *Lanes) Pop() cache.ObjectName {
	l.mu.Lock()
	defer l.mu.Unlock()
	from := urgentLane
	switch {
	case l.queued[urgentLane] == 0:
		from = plainLane
	case l.queued[plainLane] > 0 && l.streak >= maxUrgentStreak:
		from = plainLane
	}
	e := l.popFrom(from)
	if from == urgentLane && l.queued[plainLane] > 0 {
		l.streak++
	} else {
		l.streak = 0
	}
	delete(l.handed, e.key) // a hand-out nobody took the mark of
	if since, urgent := l.urgentSince(e.key); urgent {
		l.handed[e.key] = since
		delete(l.marked, e.key)
		if at, ok := l.due[e.key]; ok && !at.After(l.clock.Now()) {
			delete(l.due, e.key) // a due time still ahead stays for its timed add
		}
	}
	return e.key
}

// urgentSince is when key became urgent, if it is: marked, or due.
func (l *Lanes) urgentSince(key cache.ObjectName) (time.Time, bool) {
	if at, ok := l.marked[key]; ok {
		return at, true
	}
	if at, ok := l.due[key]; ok && !at.After(l.clock.Now()) {
		return at, true
	}
	return time.Time{}, false
}

// promote moves a queued plain key that is urgent now to the urgent lane.
func (l *Lanes) promote(key cache.ObjectName) {
	if e, queued := l.in[key]; queued && e.lane == plainLane {
		if _, urgent := l.urgentSince(key); urgent {
			l.queued[plainLane]--
			l.stamp(key)
			l.enqueue(key, urgentLane)
		}
	}
}

func (l *Lanes) enqueue(key cache.ObjectName, which lane) {
	l.seq++
	e := entry{key: key, seq: l.seq, lane: which}
	l.in[key] = e
	l.queued[which]++
	if which == urgentLane {
		l.urgent = append(l.urgent, e)
	} else {
		l.plain = append(l.plain, e)
	}
}

// popFrom takes the first live entry of a lane, dropping the stale entries
// before it. The lane holds one, as queued says.
func (l *Lanes) popFrom(which lane) entry {
	entries := &l.plain
	if which == urgentLane {
		entries = &l.urgent
	}
	for {
		e := (*entries)[0]
		(*entries)[0] = entry{}
		*entries = (*entries)[1:]
		if len(*entries) == 0 {
			*entries = nil // let the emptied backing array go
		}
		if l.in[e.key] == e {
			delete(l.in, e.key)
			l.queued[which]--
			return e
		}
	}
}
