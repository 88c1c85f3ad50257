package promotioncache

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kargo-latch/kargo-latch/kargo"
)

// pagedPromotions serves a project's Promotions in pages of at most limit,
// as the API server does, and records the options of each list.
type pagedPromotions struct {
	items []unstructured.Unstructured
	mu    sync.Mutex
	asked []metav1.ListOptions
}

func (p *pagedPromotions) react(a k8stesting.Action) (bool, runtime.Object, error) {
	opts := a.(k8stesting.ListActionImpl).ListOptions
	p.mu.Lock()
	p.asked = append(p.asked, opts)
	p.mu.Unlock()
	start := 0
	if opts.Continue != "" {
		if _, err := fmt.Sscan(opts.Continue, &start); err != nil {
			return true, nil, apierrors.NewBadRequest("bad continue")
		}
	}
	end := min(start+int(opts.Limit), len(p.items))
	if opts.Limit == 0 {
		end = len(p.items)
	}
	list := &unstructured.UnstructuredList{Object: map[string]any{"apiVersion": kargo.GroupVersion.String(), "kind": "PromotionList"}}
	list.SetResourceVersion("42")
	if end < len(p.items) {
		list.SetContinue(fmt.Sprint(end))
	}
	list.Items = p.items[start:end]
	return true, list, nil
}

// TestPromotionListPagesAndReturnsOnlyUnfinished: the list reads the
// project page by page (never all of it in one answer) from the most
// recent snapshot, with the informer's selector, and returns the
// unfinished Promotions alone, with the snapshot's resourceVersion for the
// watch to start from; each finished one is dropped after its one look.
func TestPromotionListPagesAndReturnsOnlyUnfinished(t *testing.T) {
	paged := &pagedPromotions{}
	for _, o := range history(1200) {
		if u := o.(*unstructured.Unstructured); u.GetLabels()[kargo.StageLabel] == "prod" {
			paged.items = append(paged.items, *u)
		}
	}
	client := fakeDynamic()
	client.PrependReactor("list", "promotions", paged.react)
	var dropped atomic.Int64
	selector := kargo.StageLabel + "=prod"
	src := &source{cache: New(Config{Dynamic: client, Dropped: func(*kargo.Promotion) { dropped.Add(1) }}), ns: "shop", selector: selector}
	obj, err := src.list(context.Background(), metav1.ListOptions{ResourceVersion: "0"})
	if err != nil {
		t.Fatal(err)
	}
	list := obj.(*kargo.PromotionList)
	var got []string
	for _, p := range list.Items {
		got = append(got, p.Name)
	}
	if want := []string{"prod.90000.queued", "prod.90001.pending", "prod.90002.running"}; !slices.Equal(got, want) {
		t.Errorf("the list returned %v, want only %v", got, want)
	}
	if list.ResourceVersion != "42" {
		t.Errorf("resourceVersion %q, want the snapshot's 42", list.ResourceVersion)
	}
	if n := dropped.Load(); n != 1200 {
		t.Errorf("%d finished Promotions dropped, want each of the 1,200 once", n)
	}
	if len(paged.asked) != 3 {
		t.Fatalf("%d pages read of 1,203 Promotions, want 3", len(paged.asked))
	}
	for i, opts := range paged.asked {
		if opts.Limit != listPage || opts.ResourceVersion != "" || opts.LabelSelector != selector {
			t.Errorf("page %d read with %+v, want limit %d, the most recent snapshot and the selector", i, opts, listPage)
		}
	}
	if got := paged.asked[2].Continue; got != "1000" {
		t.Errorf("the third page continued from %q, want the second's token", got)
	}
}

// An event of a finished Promotion the cache does not hold is passed on as
// a bookmark at its resourceVersion, so that the reflector's version moves
// on with the project's events (most of them about finished Promotions).
func TestDroppedPromotionEventMovesTheResourceVersion(t *testing.T) {
	s := &source{cache: New(Config{})}
	finished := promotion("prod.1.done", "prod", "Succeeded")
	finished.SetResourceVersion("4242")
	e, keep := s.unfinishedOnly(&heldPromotions{keys: map[string]bool{}}, watch.Event{Type: watch.Modified, Object: finished})
	if !keep || e.Type != watch.Bookmark {
		t.Fatalf("event %v kept %v, want a bookmark", e.Type, keep)
	}
	if rv := e.Object.(*kargo.Promotion).ResourceVersion; rv != "4242" {
		t.Errorf("bookmark at %q, want 4242", rv)
	}
}

// TestPageFallsBackToWholeOnce: a server whose list of Promotions is no
// table with Kargo's columns is asked once; that page and every later one
// are read whole through the dynamic client.
func TestPageFallsBackToWholeOnce(t *testing.T) {
	var tableAsks atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		tableAsks.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind": "PromotionList", "apiVersion": "kargo.akuity.io/v1alpha1", "metadata": {}, "items": []}`))
	}))
	defer srv.Close()
	stageClient, err := kargo.NewStageClient(&rest.Config{Host: srv.URL, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	c := New(Config{Dynamic: fakeDynamic(history(2)...), StageClient: stageClient})
	for i := range 2 {
		page, err := c.Page(context.Background(), "shop", metav1.ListOptions{Limit: listPage})
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Items) != 7 {
			t.Errorf("read %d: %d Promotions, want the 7 whole", i, len(page.Items))
		}
	}
	if n := tableAsks.Load(); n != 1 {
		t.Errorf("the table was asked for %d times, want once", n)
	}
}
