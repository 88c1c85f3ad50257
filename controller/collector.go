package controller

import (
	"hash/maphash"
	"slices"
	"sync"

	"k8s.io/client-go/tools/cache"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/controller/pausing"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/metrics"
)

// stageStates feeds the per-Stage gauges (kargo_latch_stage_paused and
// kargo_latch_stage_phase) from this replica's caches at each scrape, as
// kube-state-metrics reads its objects. Every replica runs the informers,
// so the leader, a standby and a replica that has just lost its Lease all
// export what the Stages store now: the alert rules' max over replicas
// cannot keep a Stage paused that a new leader resumed.
//
// A Stage's phase is its stored record's. It is paused while its record
// lists pauses (the operator has made the pause take effect: the paused
// label and the StagePaused Event go with that store) and a StagePause in
// force still covers it; the reason is the first covering pause's, by name,
// as the syncs pick it. Deleting the last pause resumes at once, so the
// series goes with the delete, not with the store that follows. A Stage
// without a usable record (not yet judged, garbage, or --dry-run, which
// stores nothing) exports no series.
type stageStates struct {
	c    *Controller
	seed maphash.Seed

	// mu makes walks take turns: each updates records.
	mu sync.Mutex
	// records caches what each Stage's record says, so that a walk decodes
	// only the records that changed: decoding 10,000 busy Stages' records
	// takes about a second of CPU. An unchanged resourceVersion spares even
	// the hash; a busy Stage's status moves it between scrapes while its
	// record mostly stays, and then the hash of the record tells.
	records map[cache.ObjectName]recordSummary
	scrape  uint64 // walks so far; an entry no walk saw last is dropped
}

// recordSummary is what the gauges need of a record.
type recordSummary struct {
	resourceVersion string // of the Stage it was read from
	hash            uint64 // of the record annotation it was read from
	scrape          uint64 // the last walk that saw the Stage
	phase           string // one of phaseNames; empty without a usable record
	paused          bool   // the record lists pauses covering the Stage
}

func newStageStates(c *Controller) *stageStates {
	return &stageStates{c: c, seed: maphash.MakeSeed(), records: map[cache.ObjectName]recordSummary{}}
}

// all yields the state of every cached Stage that has a usable record. It
// yields nothing until the Stage and pause caches are synced: a Stage's
// record without its pauses would tell half the truth. (The Promotions'
// cache, which syncs in the background, plays no part in it.)
func (s *stageStates) all(yield func(metrics.StageState) bool) {
	if !s.c.foregroundSynced() {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scrape++
	for _, ns := range s.c.stageNamespaces() {
		if !s.namespace(ns, yield) {
			return // the walk was cut short: keep what it did not see
		}
	}
	for key, r := range s.records {
		if r.scrape != s.scrape {
			delete(s.records, key)
		}
	}
}

// namespace yields the states of one namespace's Stages; false when the
// consumer stopped the walk. A Stage moving between the two shards of an
// operator that serves both may sit in both caches a moment: stagesIn
// yields it once, as a registry must see each series once.
func (s *stageStates) namespace(ns string, yield func(metrics.StageState) bool) bool {
	var pauses []*v1alpha1.StagePause // in force, by name; listed at the first paused Stage
	listed := false
	for _, stage := range s.c.stagesIn(ns) {
		r := s.summary(stage)
		if r.phase == "" {
			continue
		}
		state := metrics.StageState{Project: ns, Stage: stage.Name, Phase: r.phase}
		if r.paused {
			if !listed {
				pauses, listed = pausesInForce(s.c.pausesIn(ns)), true
			}
			if i := slices.IndexFunc(pauses, func(p *v1alpha1.StagePause) bool { return p.Covers(stage.Name) }); i >= 0 {
				state.Paused, state.Reason = true, pauses[i].EffectiveReason()
			}
		}
		if !yield(state) {
			return false
		}
	}
	return true
}

// summary reads what a Stage's record says, decoding it only when it
// changed since the last walk.
func (s *stageStates) summary(stage *kargo.Stage) recordSummary {
	key := cache.ObjectName{Namespace: stage.Namespace, Name: stage.Name}
	r, ok := s.records[key]
	if !ok || r.resourceVersion != stage.ResourceVersion {
		if hash := stage.State.Hash(s.seed); !ok || r.hash != hash {
			r = summarize(stage.State.Value())
			r.hash = hash
		}
		r.resourceVersion = stage.ResourceVersion
	}
	r.scrape = s.scrape
	s.records[key] = r
	return r
}

// summarize decodes a record as the syncs do: garbage is no record.
func summarize(value string) recordSummary {
	rec, err := latch.Decode(value)
	i := slices.Index(phaseNames, string(rec.Phase))
	if err != nil || i < 0 {
		return recordSummary{}
	}
	// phaseNames' own string, not the decoded one: the cache keeps no
	// memory of the decoded record.
	return recordSummary{phase: phaseNames[i], paused: len(rec.Pauses) > 0}
}

// pausesInForce keeps the pauses not being deleted, sorted by name: a pause
// being deleted covers nothing (see pausing.InForce).
func pausesInForce(pauses []*v1alpha1.StagePause) []*v1alpha1.StagePause {
	out := slices.DeleteFunc(pauses, func(p *v1alpha1.StagePause) bool { return p.DeletionTimestamp != nil })
	pausing.SortPauses(out)
	return out
}

// phaseNames are the phases the stage_phase gauge exports.
var phaseNames = func() []string {
	names := make([]string, len(latch.Phases))
	for i, p := range latch.Phases {
		names[i] = string(p)
	}
	return names
}()
