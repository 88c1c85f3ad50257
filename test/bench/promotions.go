package main

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kargo-latch/kargo-latch/test/driver"
)

// load is the load the bench achieved besides the Stages, for the table.
type load struct {
	promotions, freight         int64
	promotionBytes, freightSize int64
	createdIn                   time.Duration
	// promotionChurn is the rate of new Promotions the churn achieved.
	promotionChurn float64
}

// promotionBook holds each busy Stage's Promotions, oldest first, and
// whether one of its Promotions runs, for the promotion churn.
type promotionBook struct {
	mu      sync.Mutex
	names   map[*driver.Stage][]string
	running map[*driver.Stage]bool
}

// createPromotions gives every busy Stage its past, as Kargo leaves it:
// -promotions-per-stage terminal Promotions (20 by default, what Kargo's
// garbage collector keeps) and the Freight they promote, created through
// Kargo's real CRDs, -create-in-flight Stages at a time. It reports the
// rate achieved and the size of what it made, as the API server stores it.
func (b *bench) createPromotions(ctx context.Context) error {
	n := b.o.promotions
	say("creating %d terminal Promotions (%d per busy Stage) and the Freight they promote, %d Stages at a time",
		n*len(b.busy), n, b.o.createInFlight)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var promotions, promotionBytes, freight, freightBytes atomic.Int64
	t0 := time.Now()
	progress := time.NewTicker(15 * time.Second)
	defer progress.Stop()
	work := make(chan *driver.Stage)
	errs := make(chan error, b.o.createInFlight)
	var wg sync.WaitGroup
	for range b.o.createInFlight {
		wg.Go(func() {
			for s := range work {
				h, err := s.CreatePromotionHistory(ctx, n)
				if err != nil {
					errs <- err
					cancel()
					return
				}
				b.book.mu.Lock()
				b.book.names[s] = h.Names
				b.book.mu.Unlock()
				promotions.Add(int64(len(h.Names)))
				promotionBytes.Add(h.Bytes)
				freight.Add(int64(h.Freight))
				freightBytes.Add(h.FreightBytes)
			}
		})
	}
feed:
	for _, s := range b.busy {
		for {
			select {
			case work <- s:
				continue feed
			case <-ctx.Done():
				break feed
			case <-progress.C:
				say("   ... %d of %d Promotions and %d Freight created (%.0f objects/s)", promotions.Load(), n*len(b.busy), freight.Load(),
					float64(promotions.Load()+freight.Load())/time.Since(t0).Seconds())
			}
		}
	}
	close(work)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	b.load.promotions, b.load.promotionBytes = promotions.Load(), promotionBytes.Load()
	b.load.freight, b.load.freightSize = freight.Load(), freightBytes.Load()
	b.load.createdIn = time.Since(t0)
	objects := float64(b.load.promotions + b.load.freight)
	say("created %d Promotions (%s as stored, %.1f KB each on average) and %d Freight (%s) in %v: %.0f objects/s, %.0f API writes/s (a create and a status patch each)",
		b.load.promotions, mb(b.load.promotionBytes), kib(b.load.promotionBytes)/float64(max(1, b.load.promotions)),
		b.load.freight, mb(b.load.freightSize), b.load.createdIn.Round(time.Second),
		objects/b.load.createdIn.Seconds(), 2*objects/b.load.createdIn.Seconds())
	b.sayEtcdSize()
	return nil
}

// sayEtcdSize reports the size of etcd's database file: what the objects
// and their history cost it, for estimating larger runs.
func (b *bench) sayEtcdSize() {
	if fi, err := os.Stat(filepath.Join(b.c.Dir, "etcd", "member", "snap", "db")); err == nil {
		say("etcd's database file is %s", mb(fi.Size()))
	}
	if rss, err := clusterProcessRSS("kube-apiserver", b.c.Dir); err == nil {
		say("the apiserver's RSS is %s", mb(rss))
	}
}

// churnPromotions plays new Promotions, perSecond of them, as Kargo runs
// them: each is queued (created as Kargo's webhook leaves it, Pending),
// runs for two seconds, then Succeeded; then its Stage's oldest Promotions
// beyond -promotions-per-stage are deleted, as Kargo's garbage collector
// does. Each promotes Freight of its Stage's past. Only the Promotion is
// written, not the Stage's status (currentPromotion, lastPromotion): a new
// successful promotion on a Stage starts a latch cycle that the operator
// rightly records, which would leave figure 5 no steady state to count;
// the health churn already writes Stage status. So the operator's
// Promotion watch sees Kargo's traffic and its Stage syncs find nothing to
// write. Stages from reserved on, one Promotion per Stage at a time, and
// at most 16 in flight; a tick that finds them all busy is skipped. It
// returns once ctx is done and the Promotions in flight have finished;
// done counts the Promotions finished.
func (b *bench) churnPromotions(ctx context.Context, perSecond float64, reserved int, done *atomic.Int64) {
	if perSecond <= 0 {
		return
	}
	tick := time.NewTicker(time.Duration(float64(time.Second) / perSecond))
	defer tick.Stop()
	inFlight := make(chan struct{}, 16)
	var wg sync.WaitGroup
	defer wg.Wait()
	// The lifecycles in flight finish after the churn stops, so that no
	// Promotion is left queued for a later phase to drain.
	finish := context.WithoutCancel(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s := b.busy[reserved+rand.IntN(len(b.busy)-reserved)] //nolint:gosec // load pattern, not security
		freight := s.PastFreight()
		if len(freight) == 0 || !b.book.claim(s) {
			continue
		}
		select {
		case inFlight <- struct{}{}:
		default:
			b.book.release(s, "")
			continue
		}
		wg.Go(func() {
			defer func() { <-inFlight }()
			name, err := b.runPromotion(finish, s, freight[rand.IntN(len(freight))]) //nolint:gosec // load pattern
			b.book.release(s, name)
			if err != nil {
				say("promotion churn: %v", err)
				return
			}
			done.Add(1)
			b.collectGarbage(finish, s)
		})
	}
}

// runPromotion plays one Promotion through its lifecycle and returns its
// name once it Succeeded.
func (b *bench) runPromotion(ctx context.Context, s *driver.Stage, freight string) (string, error) {
	p, err := s.QueuePromotion(ctx, freight)
	if err != nil {
		return "", err
	}
	if err := p.Run(ctx); err != nil {
		return "", err
	}
	select { // scenario time: the promotion's argocd-update waits for the sync
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
	}
	return p.Name(), p.Finish(ctx, driver.PhaseSucceeded)
}

// collectGarbage deletes the Stage's oldest Promotions beyond
// -promotions-per-stage, as Kargo's garbage collector does.
func (b *bench) collectGarbage(ctx context.Context, s *driver.Stage) {
	b.book.mu.Lock()
	names := b.book.names[s]
	excess := max(0, len(names)-b.o.promotions)
	old := names[:excess]
	b.book.names[s] = names[excess:]
	b.book.mu.Unlock()
	for _, name := range old {
		if err := s.DeletePromotion(ctx, name); err != nil {
			say("promotion churn: deleting %s: %v", name, err)
		}
	}
}

// claim marks the Stage as running a Promotion, unless one runs already:
// Kargo runs one Promotion per Stage at a time.
func (pb *promotionBook) claim(s *driver.Stage) bool {
	pb.mu.Lock()
	defer pb.mu.Unlock()
	if pb.running[s] {
		return false
	}
	pb.running[s] = true
	return true
}

// release ends the Stage's running Promotion, recording it as its newest
// when it finished.
func (pb *promotionBook) release(s *driver.Stage, finished string) {
	pb.mu.Lock()
	defer pb.mu.Unlock()
	delete(pb.running, s)
	if finished != "" {
		pb.names[s] = append(pb.names[s], finished)
	}
}

func kib(n int64) float64 { return float64(n) / 1024 }
