package queue

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	clocktesting "k8s.io/utils/clock/testing"
)

func names(ns ...string) []cache.ObjectName {
	keys := make([]cache.ObjectName, len(ns))
	for i, n := range ns {
		keys[i] = cache.NewObjectName("p", n)
	}
	return keys
}

// drain takes every queued key in the order the queue hands them out.
func drain(t *testing.T, q Queue) []cache.ObjectName {
	t.Helper()
	var got []cache.ObjectName
	for q.Len() > 0 {
		key, _ := q.Get()
		got = append(got, key)
		q.Done(key)
	}
	return got
}

// An urgent key goes before every plain one, whether it was queued
// already, new, or being synced when it was marked; within a lane the
// order is the order of arrival.
func TestUrgentKeysGoFirst(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	q, lanes := NewWithLanes("", nil, clk)
	defer q.ShutDown()
	k := names("a", "b", "c", "d", "e")

	busy := k[4]
	q.Add(busy)
	if got, _ := q.Get(); got != busy {
		t.Fatalf("got %v", got)
	}
	for _, key := range k[:4] {
		q.Add(key)
	}
	// c, queued plainly, is marked and added again; d is marked before its
	// Add (as the handler does); e is marked while it is being synced.
	lanes.Mark(k[2])
	q.Add(k[2])
	lanes.Mark(k[3])
	q.Add(k[3])
	lanes.Mark(busy)
	q.Add(busy)
	q.Done(busy)

	if diff := cmp.Diff(names("c", "d", "e", "a", "b"), drain(t, q)); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
	if _, urgent := lanes.Take(k[0]); urgent {
		t.Errorf("a plain key was handed out as urgent")
	}
}

// The Worker passes a key's mark to its sync, once.
func TestWorkerTellsTheSyncWhenItsKeyWasMarked(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	q, lanes := NewWithLanes("", nil, clk)
	seen := make(chan time.Time, 4)
	w := &Worker{Queue: q, Lanes: lanes, Sync: func(ctx context.Context, _ cache.ObjectName) (time.Duration, error) {
		at, _ := UrgentSince(ctx)
		seen <- at
		return 0, nil
	}}
	key := cache.NewObjectName("p", "s")
	lanes.Mark(key)
	q.Add(key)
	runWorker(t, w)
	if at := <-seen; !at.Equal(clk.Now()) {
		t.Errorf("UrgentSince = %v, want the mark's time %v", at, clk.Now())
	}
	q.Add(key)
	if at := <-seen; !at.IsZero() {
		t.Errorf("a plain sync after an urgent one still saw a mark (%v)", at)
	}
}

// A requeue that falls due is urgent from then on, not before.
func TestDueKeysTakeTheUrgentLaneWhenDue(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	q, lanes := NewWithLanes("", nil, clk)
	defer q.ShutDown()
	k := names("a", "b", "c")
	lanes.MarkDueIn(k[0], 10*time.Second)
	q.Add(k[1])
	q.Add(k[0]) // an event before it falls due: plain
	if diff := cmp.Diff(names("b", "a"), drain(t, q)); diff != "" {
		t.Errorf("before it fell due (-want +got):\n%s", diff)
	}
	q.Add(k[1])
	q.Add(k[2])
	clk.Step(10 * time.Second)
	q.Add(k[0]) // the timed add
	if diff := cmp.Diff(names("a", "b", "c"), drain(t, q)); diff != "" {
		t.Errorf("once due (-want +got):\n%s", diff)
	}
	q.Add(k[0])
	if key, _ := q.Get(); key != k[0] {
		t.Fatalf("got %v", key)
	} else if _, urgent := lanes.Take(key); urgent {
		t.Errorf("a due mark was not spent by the hand-out that followed it")
	}
}

// A storm of urgent keys does not starve the plain lane.
func TestPlainKeysAreNotStarved(t *testing.T) {
	q, lanes := NewWithLanes("", nil, clocktesting.NewFakeClock(time.Unix(1000, 0)))
	defer q.ShutDown()
	plain := cache.NewObjectName("p", "plain")
	q.Add(plain)
	for i := range 3 * maxUrgentStreak {
		key := cache.NewObjectName("p", "urgent-"+strconv.Itoa(i))
		lanes.Mark(key)
		q.Add(key)
	}
	got := drain(t, q)
	if i := slices.Index(got, plain); i != maxUrgentStreak {
		t.Errorf("the plain key went out at %d, want after %d urgent ones", i, maxUrgentStreak)
	}
}

// Whatever the marks, the lanes keep the workqueue's promises: every key
// added is handed out once, none to two workers at once; marks come from
// another goroutine, as from an informer's handler.
func TestLanesKeepTheQueuesPromises(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2)) //nolint:gosec // a seeded sequence, so that a failure can be replayed
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	q, lanes := NewWithLanes("", nil, clk)
	defer q.ShutDown()
	keys := names("a", "b", "c", "d", "e", "f", "g", "h")
	stop := make(chan struct{})
	marking := make(chan struct{})
	go func() {
		defer close(marking)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
				lanes.MarkDueIn(keys[i%len(keys)], time.Duration(i%3)*time.Second)
			}
		}
	}()
	defer func() { close(stop); <-marking }()
	waiting := map[cache.ObjectName]bool{}
	processing := map[cache.ObjectName]bool{}
	var held []cache.ObjectName
	for step := range 20000 {
		key := keys[rng.IntN(len(keys))]
		switch rng.IntN(4) {
		case 0:
			lanes.Mark(key)
			clk.Step(time.Second)
			fallthrough
		case 1:
			q.Add(key)
			waiting[key] = true
		case 2:
			if q.Len() == 0 {
				continue
			}
			got, _ := q.Get()
			if processing[got] {
				t.Fatalf("step %d: %v handed out while a worker held it", step, got)
			}
			if !waiting[got] {
				t.Fatalf("step %d: %v handed out without an Add", step, got)
			}
			lanes.Take(got)
			waiting[got], processing[got] = false, true
			held = append(held, got)
		case 3:
			if len(held) == 0 {
				continue
			}
			i := rng.IntN(len(held))
			done := held[i]
			held = append(held[:i], held[i+1:]...)
			processing[done] = false
			q.Done(done)
		}
		if want := countQueued(waiting, processing); q.Len() != want {
			t.Fatalf("step %d: Len = %d, want %d", step, q.Len(), want)
		}
	}
	// Done with everything held, every waiting key comes out once.
	for _, key := range held {
		processing[key] = false
		q.Done(key)
	}
	var want []cache.ObjectName
	for key, w := range waiting {
		if w {
			want = append(want, key)
		}
	}
	got := drain(t, q)
	slices.SortFunc(got, compareNames)
	slices.SortFunc(want, compareNames)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("left waiting, handed out at the end (-want +got):\n%s", diff)
	}
}

func compareNames(a, b cache.ObjectName) int { return strings.Compare(a.String(), b.String()) }

// countQueued is how many keys wait in the queue proper: added, and not
// held by a worker (those wait in the workqueue's dirty set instead).
func countQueued(waiting, processing map[cache.ObjectName]bool) int {
	n := 0
	for key, w := range waiting {
		if w && !processing[key] {
			n++
		}
	}
	return n
}

// An urgent sync that fails keeps its place: its retry is handed out
// before the plain keys that were waiting all along.
func TestFailedUrgentSyncKeepsItsPlace(t *testing.T) {
	q, lanes := NewWithLanes("", nil, clock.RealClock{})
	failing := cache.NewObjectName("p", "failing")
	var mu sync.Mutex
	var order []string
	attempts := 0
	handled := make(chan struct{}, 16)
	w := &Worker{Queue: q, Lanes: lanes, MaxRetries: 3, Sync: func(_ context.Context, key cache.ObjectName) (time.Duration, error) {
		mu.Lock()
		order = append(order, key.Name)
		retry := key == failing && attempts == 0
		if key == failing {
			attempts++
		}
		mu.Unlock()
		// The first plain sync lasts until the retry is queued (its backoff
		// over), as a Stage's write can, so that the retry and the plain
		// keys wait together.
		if key.Name == "a" {
			deadline := time.Now().Add(10 * time.Second)
			for q.Len() < 5 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond)
			}
		}
		handled <- struct{}{}
		if retry {
			return 0, errors.New("conflict")
		}
		return 0, nil
	}}
	for _, key := range names("a", "b", "c", "d", "e") {
		q.Add(key)
	}
	lanes.Mark(failing)
	q.Add(failing)
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { w.Run(ctx, 1); close(stopped) }()
	defer func() { cancel(); <-stopped }()
	for range 7 {
		select {
		case <-handled:
		case <-time.After(10 * time.Second):
			t.Fatal("the queue stalled")
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if i := slices.Index(order[1:], "failing"); order[0] != "failing" || i < 0 || i > 1 {
		t.Errorf("order %v: want the failing key first, and its retry right after the plain sync that was running", order)
	}
}

// A due time that has passed gives way to the next one: a sync handed out
// for a mark, before its transition fell due, asks again for a later one,
// and an event before that later time is not urgent.
func TestPassedDueTimeGivesWay(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	q, lanes := NewWithLanes("", nil, clk)
	defer q.ShutDown()
	k := names("a", "b")
	lanes.MarkDueIn(k[0], 10*time.Second)
	lanes.Mark(k[0])
	q.Add(k[0])
	key, _ := q.Get()
	lanes.Take(key)
	clk.Step(20 * time.Second) // the first due time passes while it syncs
	lanes.MarkDueIn(k[0], 10*time.Second)
	q.Done(key)
	q.Add(k[1])
	q.Add(k[0]) // an event before the new due time: plain
	if diff := cmp.Diff(names("b", "a"), drain(t, q)); diff != "" {
		t.Errorf("order (-want +got):\n%s", diff)
	}
}
