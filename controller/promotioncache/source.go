package promotioncache

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/kargo"
)

// listPage is the page size of a Promotion list: about 2 KB of table per
// Promotion (most of it managedFields, which no list can leave out), so a
// page costs about a megabyte at a time.
const listPage = 500

// source lists and watches the Promotions of one namespace and shard
// selector for one informer.
type source struct {
	cache        *Cache
	ns, selector string
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

// list reads every Promotion matching the selector, page by page from the
// most recent snapshot (whatever resourceVersion the reflector asks for: a
// list that starts the cache afresh may as well be consistent), and
// returns the unfinished ones.
func (s *source) list(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	read := metav1.ListOptions{LabelSelector: s.selector, FieldSelector: opts.FieldSelector, Limit: listPage}
	out := &kargo.PromotionList{TypeMeta: metav1.TypeMeta{APIVersion: kargo.GroupVersion.String(), Kind: "PromotionList"}}
	held := &heldPromotions{keys: map[string]bool{}}
	for {
		page, err := s.cache.Page(ctx, s.ns, read)
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
				s.cache.dropped(p)
				continue
			}
			held.keys[key(p)] = true
			out.Items = append(out.Items, *p)
		}
		if read.Continue = page.Continue; read.Continue == "" {
			break
		}
	}
	s.held.Store(held)
	return out, nil
}

// Page reads one page of the Promotions of ns: as a table when the cache
// has a REST client of Kargo's API group, else (or once the server's table
// proved to lack Kargo's columns: the CRD is the same for every namespace,
// so one flag for all, said once) whole, through the dynamic client. The
// cache's lists and the drain's shared read of a project both page through
// it.
func (c *Cache) Page(ctx context.Context, ns string, opts metav1.ListOptions) (*kargo.PromotionPage, error) {
	if client := c.cfg.StageClient; client != nil && !c.whole.Load() {
		page, err := kargo.ListPromotionTable(ctx, client, ns, opts)
		if !errors.Is(err, kargo.ErrNoPromotionTable) && !apierrors.IsNotAcceptable(err) {
			return page, err
		}
		if c.whole.CompareAndSwap(false, true) {
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
func (s *source) watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	held := s.held.Load()
	if held == nil {
		return nil, errors.New("watching Promotions before they were listed")
	}
	opts.LabelSelector = s.selector
	w, err := s.cache.cfg.Dynamic.Resource(kargo.PromotionsResource).Namespace(s.ns).Watch(ctx, opts)
	if err != nil {
		return nil, err
	}
	if opened := s.cache.cfg.WatchOpened; opened != nil {
		opened(s.ns, s.selector)
	}
	return newFilteredWatch(w, func(e watch.Event) (watch.Event, bool) { return s.unfinishedOnly(held, e) }), nil
}

// unfinishedOnly turns a watch event into the informer's view: an
// unfinished Promotion's event as it is; the end (or deletion) of one the
// informer holds as its delete; anything else of a finished Promotion
// dropped, after the one look for a gate bypass that a Promotion created
// finished would otherwise not get.
func (s *source) unfinishedOnly(held *heldPromotions, e watch.Event) (watch.Event, bool) {
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
	wasHeld := held.update(key(p), gone)
	switch {
	case !gone:
		return e, true
	case wasHeld:
		// It leaves the cache, and its Stage is synced once more.
		return watch.Event{Type: watch.Deleted, Object: p}, true
	case e.Type == watch.Added:
		s.cache.dropped(p)
	}
	// Dropped, but its resourceVersion is passed on: most events of a
	// project are about finished Promotions (Kargo's garbage collector),
	// and a reflector that saw none of them would reconnect from a version
	// the API server may have compacted away, and list everything again.
	return watch.Event{Type: watch.Bookmark, Object: bookmarkAt(p.ResourceVersion)}, true
}

// dropped hands Config.Dropped a finished Promotion the cache will not hold.
func (c *Cache) dropped(p *kargo.Promotion) {
	if c.cfg.Dropped != nil {
		c.cfg.Dropped(p)
	}
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

func key(p *kargo.Promotion) string {
	return p.Namespace + "/" + p.Name
}
