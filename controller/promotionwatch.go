package controller

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/kargo"
)

// The operator needs Promotions for three things: the queued
// auto-promotions of a paused Stage that arrive after the drain's live read
// (the late drain, drainFor), the judgement of gate bypasses (every
// auto-promotion younger than bypassHorizon, also those made while the
// operator was down), and the sync of a Stage when one of its Promotions
// changes. None of these needs a finished Promotion kept in memory, and a
// Kargo project keeps up to 20 finished ones per Stage (Kargo's
// MAX_RETAINED_PROMOTIONS), 5-10 KB each: at 10,000 Stages, 200,000
// Promotions and 1-2 GB of JSON to list at every start.
//
// So each namespace (and shard selector) has an informer whose list and
// watch hand it only the unfinished Promotions (Pending or Running), and
// those a drain of this operator aborted (see ended):
//   - its list pages through the namespace's Promotions as a server-side
//     table of their metadata, stage and phase (kargo.ListPromotionTable:
//     2.0 KB a Promotion of the bench's shape, 8.4 KB whole), looks at each
//     finished one once for a gate bypass, and returns the unfinished ones
//     with the snapshot's resourceVersion;
//   - its watch, from that resourceVersion, passes the unfinished
//     Promotions' events, turns a Promotion's end into its delete (its
//     Stage is synced once more, and it leaves the cache), and passes the
//     events of Promotions that had ended already on as bookmarks at their
//     resourceVersion.
//
// The informer's store, indexed by Stage, thus holds each unfinished
// Promotion's few fields (kargo.Promotion), and kargo_latch_promotions_cached
// says how many. A relist (a watch expired) prunes what ended or went
// meanwhile, as any informer's relist does. The metadata alone (a
// PartialObjectMetadata list, 1.8 KB a Promotion) would not do: it has no
// phase, so a Promotion queued before the start and unchanged since would
// be missing from the cache, and with it the late drain of a Stage paused
// before a crash.

// promotionListPage is the page size of a Promotion list: about 2 KB of
// table per Promotion (most of it managedFields, which no list can leave
// out), so a page costs about a megabyte at a time.
const promotionListPage = 500

// promotionsByStage indexes the cached Promotions by namespace and
// spec.stage.
const promotionsByStage = "stage"

// watchPromotions makes the informers of the unfinished Promotions of ns,
// one per shard selector, indexed by Stage.
func (c *Controller) watchPromotions(ns string) error {
	for _, selector := range c.selectors {
		src := &promotionSource{c: c, ns: ns}
		lw := &cache.ListWatch{ListWithContextFunc: src.list, WatchFuncWithContext: src.watch}
		promotions := c.newSelectedInformer(kargo.PromotionsResource, ns, selector, lw, listOnly{}, &kargo.Promotion{}, c.cfg.Resync)
		if err := c.prepareSelected(kargo.PromotionsResource, ns, selector, promotions, kargo.TransformPromotion); err != nil {
			return err
		}
		if err := promotions.AddIndexers(cache.Indexers{promotionsByStage: promotionStageIndex}); err != nil {
			return fmt.Errorf("promotion index: %w", err)
		}
		if _, err := promotions.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    c.enqueuePromotionStage,
			UpdateFunc: c.updatePromotion,
			DeleteFunc: c.enqueuePromotionStage,
		}); err != nil {
			return fmt.Errorf("adding an event handler: %w", err)
		}
		c.promotionsInFlight[ns] = append(c.promotionsInFlight[ns], promotions)
	}
	return nil
}

func promotionStageIndex(obj any) ([]string, error) {
	p, ok := obj.(*kargo.Promotion)
	if !ok || p.Stage == "" {
		return nil, nil
	}
	return []string{p.Namespace + "/" + p.Stage}, nil
}

// promotionInformersFor picks the Promotion informers serving namespace ns,
// one per shard selector.
func (c *Controller) promotionInformersFor(ns string) []cache.SharedIndexInformer {
	if infs, ok := c.promotionsInFlight[ns]; ok {
		return infs
	}
	return c.promotionsInFlight[metav1.NamespaceAll]
}

// promotionsCached counts the Promotions the caches hold, for
// kargo_latch_promotions_cached.
func (c *Controller) promotionsCached() int {
	n := 0
	for _, infs := range c.promotionsInFlight {
		for _, inf := range infs {
			n += len(inf.GetStore().ListKeys())
		}
	}
	return n
}

// listOnly tells client-go's reflector that this list and watch cannot
// stream the initial list as watch events (WatchListClient, on by default
// since client-go v0.35): that would send every Promotion, whole, instead
// of the list's table.
type listOnly struct{}

func (listOnly) IsWatchListSemanticsUnSupported() bool { return true }

// promotionSource lists and watches the Promotions of one namespace for
// one informer.
type promotionSource struct {
	c  *Controller
	ns string
	// held is what the last list handed the informer, kept up to date by
	// the watches that follow it. A relist starts a new set, so that a
	// watch stopped for the relist, whose last event may still be on its
	// way through unfinishedOnly, cannot change the new one.
	held atomic.Pointer[heldPromotions]
}

// heldPromotions are the keys of the unfinished Promotions handed to an
// informer, so that its watch passes on the end of those, and only those,
// as a delete.
type heldPromotions struct {
	mu   sync.Mutex
	keys map[string]bool
}

// update notes what an event says of the Promotion key (ended: finished
// or deleted) and reports whether the informer held it before.
func (h *heldPromotions) update(key string, ended bool) (held bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	held = h.keys[key]
	if ended {
		delete(h.keys, key)
	} else {
		h.keys[key] = true
	}
	return held
}

// list reads every Promotion matching opts' selectors, page by page from
// the most recent snapshot (whatever resourceVersion the reflector asks
// for: a list that starts the cache afresh may as well be consistent), and
// returns the unfinished ones.
func (s *promotionSource) list(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	read := metav1.ListOptions{LabelSelector: opts.LabelSelector, FieldSelector: opts.FieldSelector, Limit: promotionListPage}
	out := &kargo.PromotionList{TypeMeta: metav1.TypeMeta{APIVersion: kargo.GroupVersion.String(), Kind: "PromotionList"}}
	held := &heldPromotions{keys: map[string]bool{}}
	for {
		page, err := s.c.promotionPage(ctx, s.ns, read)
		if err != nil {
			return nil, err
		}
		if read.Continue == "" {
			out.ResourceVersion = page.ResourceVersion
		}
		for _, p := range page.Items {
			if ended(p) {
				// Not cached: this is the one look a gate bypass made while
				// the operator was down gets.
				s.c.watchGateBypass(p)
				continue
			}
			held.keys[promotionKey(p)] = true
			out.Items = append(out.Items, *p)
		}
		if read.Continue = page.Continue; read.Continue == "" {
			break
		}
	}
	s.held.Store(held)
	return out, nil
}

// promotionPage reads one page of the Promotions of ns: as a table when
// the operator has a REST client of Kargo's API group, else (or once the
// server's table proved to lack Kargo's columns: the CRD is the same for
// every namespace, so one operator-wide flag, said once) whole, through the
// dynamic client. The Promotion caches' lists and the drain's shared read
// both page through it.
func (c *Controller) promotionPage(ctx context.Context, ns string, opts metav1.ListOptions) (*kargo.PromotionPage, error) {
	if client := c.cfg.StageClient; client != nil && !c.promotionsWhole.Load() {
		page, err := kargo.ListPromotionTable(ctx, client, ns, opts)
		if !errors.Is(err, kargo.ErrNoPromotionTable) && !apierrors.IsNotAcceptable(err) {
			return page, err
		}
		if c.promotionsWhole.CompareAndSwap(false, true) {
			klog.FromContext(ctx).Info("The API server lists Promotions without Kargo's Stage and Phase columns; reading them whole, a page at a time",
				"namespace", ns, "err", err)
		}
	}
	list, err := c.cfg.Dynamic.Resource(kargo.PromotionsResource).Namespace(ns).List(ctx, opts)
	if err != nil {
		return nil, err
	}
	page := &kargo.PromotionPage{ResourceVersion: list.GetResourceVersion(), Continue: list.GetContinue(), Items: make([]*kargo.Promotion, len(list.Items))}
	for i := range list.Items {
		page.Items[i] = kargo.PromotionFromUnstructured(&list.Items[i])
	}
	return page, nil
}

// watch watches the Promotions from the resourceVersion of the list (or of
// the last event seen) and passes on what concerns the unfinished ones.
func (s *promotionSource) watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	held := s.held.Load()
	if held == nil {
		return nil, errors.New("watching Promotions before they were listed")
	}
	w, err := s.c.cfg.Dynamic.Resource(kargo.PromotionsResource).Namespace(s.ns).Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	return newFilteredWatch(w, func(e watch.Event) (watch.Event, bool) { return s.unfinishedOnly(held, e) }), nil
}

// unfinishedOnly turns a watch event into the informer's view: an
// unfinished Promotion's event as it is; the end (or deletion) of one the
// informer holds as its delete; anything else of a finished Promotion
// dropped, after the one look for a gate bypass that a Promotion created
// finished would otherwise not get.
func (s *promotionSource) unfinishedOnly(held *heldPromotions, e watch.Event) (watch.Event, bool) {
	u, ok := e.Object.(*unstructured.Unstructured)
	if !ok || e.Type == watch.Error {
		return e, true // an error's Status: the reflector reads it
	}
	p := kargo.PromotionFromUnstructured(u)
	e.Object = p
	if e.Type == watch.Bookmark {
		return e, true
	}
	gone := e.Type == watch.Deleted || ended(p)
	wasHeld := held.update(promotionKey(p), gone)
	switch {
	case !gone:
		return e, true
	case wasHeld:
		// It leaves the cache, and its Stage is synced once more.
		return watch.Event{Type: watch.Deleted, Object: p}, true
	case e.Type == watch.Added:
		s.c.watchGateBypass(p)
	}
	// Dropped, but its resourceVersion is passed on: most events of a
	// project are about finished Promotions (Kargo's garbage collector),
	// and a reflector that saw none of them would reconnect from a version
	// the API server may have compacted away, and list everything again.
	return watch.Event{Type: watch.Bookmark, Object: bookmarkAt(p.ResourceVersion)}, true
}

// bookmarkAt is the object of a bookmark at resourceVersion rv.
func bookmarkAt(rv string) *kargo.Promotion {
	b := &kargo.Promotion{}
	b.ResourceVersion = rv
	return b
}

// ended reports whether p is finished for the cache: finished, and not
// aborted by a drain of this operator (kargo-latch.io/drained-by) that may
// still owe it its line in status.drained. Those stay until Kargo's garbage
// collector deletes them: a few per drained Stage.
func ended(p *kargo.Promotion) bool {
	_, drained := p.Annotations[api.DrainedByAnnotation]
	return p.Terminal() && !drained
}

func promotionKey(p *kargo.Promotion) string {
	return p.Namespace + "/" + p.Name
}

// filteredWatch is watch.Filter that stops sending once stopped: the
// reflector stops reading when it stops the watch, and watch.Filter's
// goroutine would then block on its send for ever.
type filteredWatch struct {
	source watch.Interface
	filter func(watch.Event) (watch.Event, bool)
	result chan watch.Event
	done   chan struct{}
	stop   sync.Once
}

func newFilteredWatch(source watch.Interface, filter func(watch.Event) (watch.Event, bool)) *filteredWatch {
	w := &filteredWatch{source: source, filter: filter, result: make(chan watch.Event), done: make(chan struct{})}
	go w.loop()
	return w
}

func (w *filteredWatch) ResultChan() <-chan watch.Event { return w.result }

func (w *filteredWatch) Stop() {
	w.stop.Do(func() {
		close(w.done)
		w.source.Stop()
	})
}

func (w *filteredWatch) loop() {
	defer close(w.result)
	for e := range w.source.ResultChan() {
		e, keep := w.filter(e)
		if !keep {
			continue
		}
		select {
		case w.result <- e:
		case <-w.done:
			return
		}
	}
}
