package queue

import (
	"sync"
	"time"

	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
)

// Lanes is the store of a Queue's waiting keys, in two FIFO lanes: keys
// marked urgent are handed out before all others. A failure must not wait
// behind the health flaps of a thousand busy Stages, each of which only
// confirms what the operator already knows: under churn, a plain FIFO put
// a failure's sync behind every flap queued before it.
//
// The workqueue around it keeps everything else: a key is queued once, is
// never handed to two workers at once, and one added while it is being
// synced waits until that sync is done, then takes the lane its mark gives
// it. Only the order changes, so a wrongly marked key costs others a little
// latency and nothing more.
//
// The workqueue calls Touch, Push, Len and Pop under its own lock; Mark
// and Take come from other goroutines, so Lanes has a lock of its own,
// always taken after the workqueue's.
type Lanes struct {
	clock clock.PassiveClock

	mu sync.Mutex
	// urgent and plain hold keys in arrival order. A key moved to the
	// urgent lane by Touch leaves a stale copy in the plain one: in names
	// the lane each queued key is really in, and Pop skips the rest.
	urgent, plain []cache.ObjectName
	in            map[cache.ObjectName]lane
	// marked is when each key was marked urgent, until it is handed out;
	// handed is that time for a key handed out since, until Take.
	marked, handed map[cache.ObjectName]time.Time
}

type lane uint8

const (
	plainLane lane = iota + 1
	urgentLane
)

// NewLanes returns empty lanes; clk times the marks.
func NewLanes(clk clock.PassiveClock) *Lanes {
	return &Lanes{clock: clk, in: map[cache.ObjectName]lane{}, marked: map[cache.ObjectName]time.Time{}, handed: map[cache.ObjectName]time.Time{}}
}

// Mark makes key urgent: queued now or on its next Add, it goes before
// every key that is not. Mark it before adding it, so that the Add cannot
// find it unmarked. A key marked twice before it is handed out keeps its
// first mark's time.
func (l *Lanes) Mark(key cache.ObjectName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.marked[key]; !ok {
		l.marked[key] = l.clock.Now()
	}
	if l.in[key] == plainLane {
		l.moveToUrgent(key)
	}
}

// Take reports when key, just handed out, was marked urgent, if it was;
// the mark is spent.
func (l *Lanes) Take(key cache.ObjectName) (markedAt time.Time, urgent bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	markedAt, urgent = l.handed[key]
	delete(l.handed, key)
	return markedAt, urgent
}

// Touch is the workqueue's hook for a key added again while it waits: a
// mark made since moves it to the urgent lane (Mark already did, unless
// the key was not queued then).
func (l *Lanes) Touch(key cache.ObjectName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.marked[key]; ok && l.in[key] == plainLane {
		l.moveToUrgent(key)
	}
}

// Push queues key in the lane its mark gives it.
func (l *Lanes) Push(key cache.ObjectName) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.marked[key]; ok {
		l.urgent = append(l.urgent, key)
		l.in[key] = urgentLane
		return
	}
	l.plain = append(l.plain, key)
	l.in[key] = plainLane
}

// Len is how many keys are queued, stale copies not counted.
func (l *Lanes) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.in)
}

// Pop hands out the oldest urgent key, else the oldest plain one. The
// workqueue calls it only when Len is positive.
func (l *Lanes) Pop() cache.ObjectName {
	l.mu.Lock()
	defer l.mu.Unlock()
	key, ok := l.popFrom(&l.urgent, urgentLane)
	if !ok {
		key, _ = l.popFrom(&l.plain, plainLane)
	}
	delete(l.in, key)
	if at, marked := l.marked[key]; marked {
		delete(l.marked, key)
		l.handed[key] = at
	}
	return key
}

// popFrom takes the first key of a lane that is really in it, dropping the
// stale copies before it.
func (l *Lanes) popFrom(keys *[]cache.ObjectName, which lane) (cache.ObjectName, bool) {
	for len(*keys) > 0 {
		key := (*keys)[0]
		(*keys)[0] = cache.ObjectName{}
		*keys = (*keys)[1:]
		if l.in[key] == which {
			return key, true
		}
	}
	*keys = nil // let the emptied backing array go
	return cache.ObjectName{}, false
}

func (l *Lanes) moveToUrgent(key cache.ObjectName) {
	l.urgent = append(l.urgent, key)
	l.in[key] = urgentLane
}
