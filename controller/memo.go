package controller

import (
	"hash/maphash"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"github.com/kargo-latch/kargo-latch/controller/markverified"
	"github.com/kargo-latch/kargo-latch/controller/verification"
	"github.com/kargo-latch/kargo-latch/latch"
)

// memo is what the operator remembers of a Stage between syncs, in memory
// only. None of it is needed for correctness after a restart: it keeps
// reports (Events, counters) to one per change instead of one per sync, and
// saves reads a fresh memo would make.
type memo struct {
	health        latch.Health // last health seen, to count flaps once
	configProblem string       // last invalid-settings message reported
	badState      string       // last garbage record reported
	badHealth     string       // last unknown health string reported
	statusMissing bool         // a missing status was reported
	tooManyApps   bool         // a Stage listing too many Apps was reported
	// announced names the pause whose StagePaused Event this replica made;
	// owed is one whose create failed, kept until it is made.
	announced string
	owed      *announcement
	// writtenState stands for the record this replica last wrote to the
	// Stage, or tried to: while the cache shows another, the cache may be
	// behind. It starts unknown: a replica that just became leader may
	// cache a Stage behind the last write of the leader before it.
	writtenState stateDigest
	// replacedVersion is the resourceVersion of the Stage that this
	// replica's last store replaced, once the API server took it: a cache
	// that still holds that version is behind, and the store's own watch
	// event is on its way.
	replacedVersion string
	// liveDrainOwed names the pause whose live drain failed in this term:
	// the next syncs drain from a live read again until one succeeds.
	liveDrainOwed types.UID
	mark          markverified.Memo // marks tried and stored
	// dryRunRecord stands in for the annotation in --dry-run, which writes
	// nothing; nil when there is none.
	dryRunRecord *latch.Record

	// verification is verify-on-latch's: refused starts and their
	// backoff, the steps that ended runs, what was reported.
	verification verification.Memo

	// unreadableCopy stands for the cached copy of the record last
	// reported unreadable (recordOf).
	unreadableCopy stateDigest
}

// stateDigest stands for a record's value. A memo keeps one for every Stage
// this replica wrote, and records run to kilobytes (a cycle's Apps, the
// verification history): 10,000 copies of them would be most of the
// operator's memory. A false match would skip the live read that guards a
// failure's pause against a stale cache; its odds, 2^-64 with a seed of the
// process's own, are far below those of the API server losing a write.
type stateDigest struct {
	known bool
	sum   uint64
}

var digestSeed = maphash.MakeSeed()

func digestOf(value string) stateDigest {
	return stateDigest{known: true, sum: maphash.String(digestSeed, value)}
}

// matches reports whether value is the record d stands for; an unknown
// digest matches none.
func (d stateDigest) matches(value string) bool {
	return d.known && d.sum == maphash.String(digestSeed, value)
}

type memos struct {
	mu sync.Mutex
	m  map[cache.ObjectName]*memo
}

func newMemos() *memos { return &memos{m: map[cache.ObjectName]*memo{}} }

// get returns the memo of key, creating it. Each key is synced by one worker
// at a time (the queue guarantees it), so the memo itself needs no lock.
func (ms *memos) get(key cache.ObjectName) *memo {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	m, ok := ms.m[key]
	if !ok {
		m = &memo{}
		ms.m[key] = m
	}
	return m
}

// newTerm forgets, at the start of a leadership term, what only holds while
// this replica is the one writing: another leader may have written the
// Stages since this replica last did, and its cache may be behind that.
func (ms *memos) newTerm() {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	for _, m := range ms.m {
		m.writtenState, m.replacedVersion = stateDigest{}, ""
		m.announced = ""
	}
}

func (ms *memos) forget(key cache.ObjectName) {
	ms.mu.Lock()
	defer ms.mu.Unlock()
	delete(ms.m, key)
}
