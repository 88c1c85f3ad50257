// Package promotioncache is kargo-latch's cache of Promotions, bounded to
// the ones that can still matter: the unfinished (Pending, Running, or not
// yet looked at by Kargo), and those a drain of this operator aborted,
// indexed by Stage.
//
// The operator needs Promotions for three things: the queued
// auto-promotions of a paused Stage that arrive after the drain's live read
// (the late drain), the judgement of gate bypasses (every auto-promotion
// younger than an Event lives, also those made while the operator was
// down), and the sync of a Stage when one of its Promotions changes. None of
// these needs a finished Promotion kept in memory, and a Kargo project keeps
// up to 20 finished ones per Stage (Kargo's MAX_RETAINED_PROMOTIONS), 5-10
// KB each: at 10,000 Stages, 200,000 Promotions and 1-2 GB of JSON to list
// at every start (docs/performance.md, "Decision on Promotions").
//
// So each namespace (and shard selector) has an informer whose list and
// watch hand it only the unfinished Promotions, and those a drain of this
// operator aborted (see ended):
//   - its list pages through the namespace's Promotions as a server-side
//     table of their metadata, stage and phase (kargo.ListPromotionTable:
//     2.0 KB a Promotion of the bench's shape, 8.4 KB whole), hands each
//     finished one to Config.Dropped once (the gate-bypass judgement's
//     look), and returns the unfinished ones with the snapshot's
//     resourceVersion;
//   - its watch, from that resourceVersion, passes the unfinished
//     Promotions' events, turns a Promotion's end into its delete (its
//     Stage is synced once more, and it leaves the cache), and passes the
//     events of Promotions that had ended already on as bookmarks at their
//     resourceVersion.
//
// The informer's store thus holds each unfinished Promotion's few fields
// (kargo.Promotion), and Count says how many
// (kargo_latch_promotions_cached). A relist (a watch expired) prunes what
// ended or went meanwhile, as any informer's relist does. The metadata
// alone (a PartialObjectMetadata list, 1.8 KB a Promotion) would not do: it
// has no phase, so a Promotion queued before the start and unchanged since
// would be missing from the cache, and with it the late drain of a Stage
// paused before a crash.
package promotioncache

import (
	"fmt"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kargo-latch/kargo-latch/kargo"
)

// Config is what the cache needs. Only Dynamic is required.
type Config struct {
	// Dynamic watches the Promotions, and lists them whole when there is
	// no StageClient or the server's table lacks Kargo's columns.
	Dynamic dynamic.Interface
	// StageClient, a REST client of Kargo's API group
	// (kargo.NewStageClient), lists Promotions as a table of their
	// metadata, stage and phase; nil lists them whole, page by page.
	StageClient rest.Interface
	// Resync is how often the informers hand every cached Promotion to
	// Handler again (as both old and new); 0 never.
	Resync time.Duration
	// Handler hears of the cached Promotions: each unfinished one added or
	// changed, and its end or deletion as a delete.
	Handler cache.ResourceEventHandler
	// Dropped is called with each finished Promotion the cache sees but
	// never holds, so Handler never hears of it: each finished row of a
	// list (what ended while the operator was down), and each Promotion
	// created finished. The gate-bypass judgement must see those once.
	Dropped func(*kargo.Promotion)
	// WatchOpened is called each time an informer's watch opens: the
	// controller's readiness then forgets that cache's last watch error.
	WatchOpened func(ns, selector string)
}

// Cache is the bounded Promotion cache of every namespace the operator
// serves.
type Cache struct {
	cfg Config
	// informers by namespace, one per shard selector; the key "" holds the
	// all-namespaces ones. Filled before the informers run, read after.
	informers map[string][]cache.SharedIndexInformer
	// whole is set once the server's table of Promotions proved unusable
	// (kargo.ErrNoPromotionTable): pages are read whole from then on.
	whole atomic.Bool
}

// New returns an empty Cache; NewInformer adds each namespace's informers.
func New(cfg Config) *Cache {
	return &Cache{cfg: cfg, informers: map[string][]cache.SharedIndexInformer{}}
}

// byStage indexes the cached Promotions by namespace and spec.stage.
const byStage = "stage"

// NewInformer makes the informer of the unfinished Promotions of namespace
// ns (all when empty) that match a label selector (all when empty: the API
// server filters, so another shard's Promotions are neither sent nor
// cached), indexed by Stage, with Config.Handler. The caller runs it; the
// lookups see it from now on.
func (c *Cache) NewInformer(ns, selector string) (cache.SharedIndexInformer, error) {
	src := &source{cache: c, ns: ns, selector: selector}
	lw := &cache.ListWatch{ListWithContextFunc: src.list, WatchFuncWithContext: src.watch}
	inf := cache.NewSharedIndexInformerWithOptions(cache.ToListWatcherWithWatchListSemantics(lw, listOnly{}), &kargo.Promotion{},
		cache.SharedIndexInformerOptions{
			ResyncPeriod: c.cfg.Resync,
			Indexers: cache.Indexers{
				cache.NamespaceIndex: cache.MetaNamespaceIndexFunc,
				byStage:              stageIndex,
			},
			ObjectDescription: kargo.PromotionsResource.String(),
		})
	if c.cfg.Handler != nil {
		if _, err := inf.AddEventHandler(c.cfg.Handler); err != nil {
			return nil, fmt.Errorf("adding an event handler: %w", err)
		}
	}
	c.informers[ns] = append(c.informers[ns], inf)
	return inf, nil
}

func stageIndex(obj any) ([]string, error) {
	p, ok := obj.(*kargo.Promotion)
	if !ok || p.Stage == "" {
		return nil, nil
	}
	return []string{p.Namespace + "/" + p.Stage}, nil
}

// listOnly tells client-go's reflector that this list and watch cannot
// stream the initial list as watch events (WatchListClient, on by default
// since client-go v0.35): that would send every Promotion, whole, instead
// of the list's table.
type listOnly struct{}

func (listOnly) IsWatchListSemanticsUnSupported() bool { return true }

// informersFor picks the informers serving namespace ns, one per shard
// selector.
func (c *Cache) informersFor(ns string) []cache.SharedIndexInformer {
	if infs, ok := c.informers[ns]; ok {
		return infs
	}
	return c.informers[metav1.NamespaceAll]
}

// ForStage lists the cached Promotions of Stage stage in namespace ns: the
// unfinished ones, and those a drain aborted.
func (c *Cache) ForStage(ns, stage string) []*kargo.Promotion {
	var out []*kargo.Promotion
	for _, inf := range c.informersFor(ns) {
		cached, err := inf.GetIndexer().ByIndex(byStage, ns+"/"+stage)
		if err != nil {
			continue // the index exists from the start: no error to tell
		}
		for _, o := range cached {
			if p, ok := o.(*kargo.Promotion); ok {
				out = append(out, p)
			}
		}
	}
	return out
}

// Count counts the Promotions the informers hold, for
// kargo_latch_promotions_cached.
func (c *Cache) Count() int {
	n := 0
	for _, infs := range c.informers {
		for _, inf := range infs {
			n += len(inf.GetStore().ListKeys())
		}
	}
	return n
}
