package pausing

import (
	"context"
	"fmt"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
)

// A project-wide pause drains every Stage of the project at once. Each drain
// must read the Promotions live, not from the cache (one queued a moment
// before the pause may not be cached yet), but they need not each read
// them: a read that starts after the pause exists sees every auto-promotion
// made before it; the gate refuses those made after, once the API server's
// own view of the pauses has it. A drain only ever runs for a pause this
// replica's cache shows, so a read started by any drain of that pause will
// do for all of them. What an API server admitted in the moment before its
// gate knew the pause reaches the cache later, and is drained then (see
// DrainOwed). One read of
// the project instead of one per Stage spares the API server hundreds of
// LISTs exactly when a person pushed the big red button.

// sharedListFor is how long the drains of one pause share its read. Past
// it (a Stage created later, a retry) a drain reads again.
const sharedListFor = time.Minute

// drainListPage is the page size of the read, so that a project with
// thousands of Promotions is never held in memory whole: only the queued
// auto-promotions, which a drain may abort, are kept.
const drainListPage = 100

// projectLists holds each project-wide pause's shared read.
type projectLists struct {
	mu      sync.Mutex
	byPause map[types.UID]*pauseList
}

// pauseList is one read of a project's queued auto-promotions, by Stage.
type pauseList struct {
	done    chan struct{} // closed when the read ended
	started time.Time
	byStage map[string][]*kargo.Promotion
	err     error
}

// stagePromotions lists a Stage's Promotions from the API server, not the
// cache: one created a moment before the pause, not yet delivered to the
// informer, must not escape the drain. Kargo's webhook labels every
// Promotion with its Stage, so one label-filtered LIST reads them; the
// drains of a project-wide pause share one read of the project instead
// (drainlist.go). Cached ones the read missed are added.
func (d *Drainer) stagePromotions(ctx context.Context, stage *kargo.Stage, pause *v1alpha1.StagePause) ([]*kargo.Promotion, error) {
	var out []*kargo.Promotion
	switch {
	case pause.Spec.Stage == v1alpha1.AllStages:
		shared, err := d.queuedAutoPromotions(ctx, pause, stage.Name)
		if err != nil {
			return nil, err
		}
		out = append(out, shared...)
	case len(validation.IsValidLabelValue(stage.Name)) == 0:
		// A name too long for a label value (over 63) cannot be Kargo's
		// label either: such a Stage's Promotions are known from the cache.
		list, err := d.Dynamic.Resource(kargo.PromotionsResource).Namespace(stage.Namespace).
			List(ctx, metav1.ListOptions{LabelSelector: kargo.StageLabel + "=" + stage.Name})
		if err != nil {
			return nil, fmt.Errorf("listing the Stage's Promotions: %w", err)
		}
		for i := range list.Items {
			if p := kargo.PromotionFromUnstructured(&list.Items[i]); p.Stage == stage.Name {
				out = append(out, p)
			}
		}
	}
	seen := map[string]bool{}
	for _, p := range out {
		seen[p.Name] = true
	}
	for _, p := range d.Cached(stage) {
		if !seen[p.Name] {
			out = append(out, p)
		}
	}
	return out, nil
}

// queuedAutoPromotions returns the queued auto-promotions of stage, read
// live once for all the Stages pause covers.
func (d *Drainer) queuedAutoPromotions(ctx context.Context, pause *v1alpha1.StagePause, stage string) ([]*kargo.Promotion, error) {
	l := &d.lists
	now := d.Clock.Now()
	l.mu.Lock()
	if l.byPause == nil {
		l.byPause = map[types.UID]*pauseList{}
	}
	for uid, old := range l.byPause {
		if now.Sub(old.started) > sharedListFor {
			delete(l.byPause, uid)
		}
	}
	read, shared := l.byPause[pause.UID]
	if !shared {
		read = &pauseList{done: make(chan struct{}), started: now}
		l.byPause[pause.UID] = read
	}
	l.mu.Unlock()

	if !shared {
		read.byStage, read.err = d.listQueuedAutoPromotions(ctx, pause.Namespace)
		if read.err != nil {
			// Not shared: the next drain reads again (unless a newer read
			// has taken this one's place).
			l.mu.Lock()
			if l.byPause[pause.UID] == read {
				delete(l.byPause, pause.UID)
			}
			l.mu.Unlock()
		}
		close(read.done)
	}
	select {
	case <-read.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if read.err != nil {
		return nil, read.err
	}
	return read.byStage[stage], nil
}

// listQueuedAutoPromotions reads the Promotions of a namespace that this
// operator's shard serves, page by page, as the Promotion cache lists them
// (a table of their metadata, stage and phase, not 5-10 KB of steps each),
// and keeps those a drain may owe something: the queued auto-promotions, and
// those a drain of this operator aborted, by Stage.
func (d *Drainer) listQueuedAutoPromotions(ctx context.Context, ns string) (map[string][]*kargo.Promotion, error) {
	byStage := map[string][]*kargo.Promotion{}
	for _, selector := range d.Selectors {
		opts := metav1.ListOptions{LabelSelector: selector, Limit: drainListPage}
		for {
			page, err := d.ListPage(ctx, ns, opts)
			if err != nil {
				return nil, fmt.Errorf("listing the project's Promotions: %w", err)
			}
			for _, p := range page.Items {
				if queuedAuto(p) || drainedFor(p) != "" {
					byStage[p.Stage] = append(byStage[p.Stage], p)
				}
			}
			if opts.Continue = page.Continue; opts.Continue == "" {
				break
			}
		}
	}
	return byStage, nil
}

// queuedAuto reports whether a drain may abort p: Kargo's own
// auto-promotion, not yet running.
func queuedAuto(p *kargo.Promotion) bool {
	return (p.Phase == "" || p.Phase == "Pending") && p.AutoPromotion()
}
