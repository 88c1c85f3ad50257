package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/test/browser"
)

// observerJS runs in each tab before the page's own scripts (the page's
// Content-Security-Policy does not apply to it). It notes when each message
// of the live feed arrives (a listener added before the page's own
// onmessage, so before its parse and render), and offers two promises,
// each resolved by a MutationObserver at once, not by polling:
//   - cards: the first time every card is in the DOM, and the end of the
//     frame that paints them (a requestAnimationFrame callback runs before
//     the frame's style, layout and paint; a message posted from it is
//     handled after them);
//   - waits[key], made by expect(key): when the card of Stage key first
//     says "⏸ Paused", and the end of the frame that paints it.
//
// cards' times are performance.now(): from the navigation's start; waits'
// are epoch milliseconds, performance.timeOrigin + performance.now(),
// compared with the bench's clock on the same machine.
const observerJS = `(() => {
  const want = %d;
  const B = window.__bench = { msgs: [], waits: {} };
  const ES = window.EventSource;
  window.EventSource = function (url, init) {
    const es = new ES(url, init);
    es.addEventListener('message', (e) => B.msgs.push({ at: performance.now(), bytes: e.data.length }));
    return es;
  };
  window.EventSource.prototype = ES.prototype;
  const afterPaint = (f) => requestAnimationFrame(() => {
    const c = new MessageChannel();
    c.port1.onmessage = f;
    c.port2.postMessage(null);
  });
  B.cards = new Promise((resolve) => {
    const obs = new MutationObserver(() => {
      if (document.querySelectorAll('article[data-stage]').length < want) return;
      obs.disconnect();
      const dom = performance.now(), m = B.msgs[0] || { at: 0, bytes: 0 };
      afterPaint(() => resolve({ message: m.at, bytes: m.bytes, dom, painted: performance.now() }));
    });
    obs.observe(document, { childList: true, subtree: true });
  });
  const epoch = (t) => performance.timeOrigin + t;
  B.expect = (key) => {
    const sel = 'article[data-stage="' + CSS.escape(key) + '"] [data-field="paused"]';
    const from = B.msgs.length;
    B.waits[key] = new Promise((resolve) => {
      const obs = new MutationObserver(() => {
        const el = document.querySelector(sel);
        if (!el || !el.textContent.startsWith('\u23f8 Paused')) return;
        obs.disconnect();
        const dom = performance.now(), m = B.msgs[B.msgs.length - 1];
        afterPaint(() => resolve({ message: B.msgs.length > from ? epoch(m.at) : 0, dom: epoch(dom), painted: epoch(performance.now()) }));
      });
      obs.observe(document.getElementById('main'), { childList: true, subtree: true, characterData: true });
    });
    return true;
  };
})();`

// dashBrowser is the headless Chromium of the dashboard's figures, and the
// tab kept open for the changes.
type dashBrowser struct {
	url    string
	want   int
	root   context.Context
	cancel context.CancelFunc
	// tab is the last first page's tab, kept for the changes.
	tab      context.Context
	closeTab context.CancelFunc
	console  *browser.Console
}

func newDashBrowser(ctx context.Context, url string, want int) (*dashBrowser, error) {
	root, cancel, err := browser.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("the dashboard's figures need Chromium (make browser): %w", err)
	}
	return &dashBrowser{url: url, want: want, root: root, cancel: cancel}, nil
}

func (br *dashBrowser) close() {
	if br.closeTab != nil {
		br.closeTab()
	}
	br.cancel()
}

// firstPage is one first page: from the navigation's start, the live
// feed's full message in, every card in the DOM, and painted.
type firstPage struct {
	message, dom, painted time.Duration
	bytes                 int
}

// pageTimes are a page's times in milliseconds, as observerJS gives them.
type pageTimes struct {
	Message float64 `json:"message"`
	DOM     float64 `json:"dom"`
	Painted float64 `json:"painted"`
	Bytes   int     `json:"bytes"`
}

// firstPage opens the page in a new tab and times it; keep keeps the tab
// open for the changes, else it is closed.
func (br *dashBrowser) firstPage(ctx context.Context, keep bool) (firstPage, error) {
	tab, closeTab := chromedp.NewContext(br.root)
	if err := chromedp.Do(tab); err != nil { // opens the tab, without a deadline
		closeTab()
		return firstPage{}, err
	}
	console, err := browser.CaptureConsole(tab)
	if err == nil {
		err = chromedp.Do(tab, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			_, err := cdp.Call(ctx, t, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: fmt.Sprintf(observerJS, br.want)})
			return err
		}))
	}
	var got pageTimes
	if err == nil {
		bounded, cancel := context.WithTimeout(tab, 2*time.Minute)
		err = chromedp.Do(bounded, chromedp.Navigate(br.url))
		if err == nil {
			got, err = chromedp.Run(bounded, chromedp.Evaluate[pageTimes](`window.__bench.cards`, chromedp.EvalAwaitPromise))
		}
		cancel()
	}
	if err != nil {
		closeTab()
		return firstPage{}, fmt.Errorf("the dashboard's first page: %w", err)
	}
	if keep {
		br.tab, br.closeTab, br.console = tab, closeTab, console
	} else {
		if err := console.Check(tab); err != nil {
			say("dashboard: %v", err)
		}
		closeTab()
	}
	d := func(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }
	return firstPage{message: d(got.Message), dom: d(got.DOM), painted: d(got.Painted), bytes: got.Bytes}, nil
}

// sayFirstPageSplit splits the first pages: the full message in (the
// page's load, its feed's request, the server's encoding, the transfer),
// the parse and render to the DOM, then style, layout and paint.
func sayFirstPageSplit(pages []firstPage) {
	var msg, render, paint []time.Duration
	for _, p := range pages {
		msg, render, paint = append(msg, p.message), append(render, p.dom-p.message), append(paint, p.painted-p.dom)
	}
	say("   split: navigation → full message in %v; → every card in the DOM (JSON.parse, render) %v; → painted (style, layout, paint) %v",
		quantiles(msg), quantiles(render), quantiles(paint))
}

// clockOffset is how far the page's clock (performance.timeOrigin +
// performance.now()) is ahead of the bench's, from the round trip of 10
// that took least, and that round trip.
func (br *dashBrowser) clockOffset(ctx context.Context) (offset, rtt time.Duration, err error) {
	rtt = time.Hour
	for range 10 {
		t0 := time.Now()
		at, err := chromedp.Run(br.tab, chromedp.Evaluate[float64](`performance.timeOrigin + performance.now()`))
		t1 := time.Now()
		if err != nil {
			return 0, 0, err
		}
		if t1.Sub(t0) < rtt {
			rtt = t1.Sub(t0)
			offset = epochMillis(at).Sub(t0.Add(rtt / 2))
		}
	}
	return offset, rtt, ctx.Err()
}

func epochMillis(v float64) time.Time { return time.UnixMicro(int64(v * 1000)) }

// expectPaused makes the page watch for the card of key to say paused.
func (br *dashBrowser) expectPaused(ctx context.Context, key string) error {
	k, _ := json.Marshal(key)
	_, err := chromedp.Run(br.tab, chromedp.Evaluate[bool](fmt.Sprintf(`window.__bench.expect(%s)`, k)))
	if err == nil {
		err = ctx.Err()
	}
	return err
}

// shown is a change as the page saw it, on the bench's clock: its message
// in, the card in the DOM, and painted.
type shown struct{ message, dom, painted time.Time }

// waitPaused waits until the card of key is painted paused.
func (br *dashBrowser) waitPaused(ctx context.Context, key string, offset time.Duration) (shown, error) {
	k, _ := json.Marshal(key)
	bounded, cancel := context.WithTimeout(br.tab, time.Minute)
	defer cancel()
	got, err := chromedp.Run(bounded, chromedp.Evaluate[pageTimes](fmt.Sprintf(`window.__bench.waits[%s]`, k), chromedp.EvalAwaitPromise))
	if err != nil {
		return shown{}, fmt.Errorf("the card of %s never showed paused: %w", key, err)
	}
	at := func(v float64) time.Time { return epochMillis(v).Add(-offset) }
	s := shown{dom: at(got.DOM), painted: at(got.Painted), message: at(got.Message)}
	if got.Message == 0 {
		s.message = s.dom
	}
	return s, ctx.Err()
}

// heap is the page's JavaScript heap in use (Chromium's performance.memory).
func (br *dashBrowser) heap(ctx context.Context) int64 {
	v, err := chromedp.Run(br.tab, chromedp.Evaluate[float64](`performance.memory ? performance.memory.usedJSHeapSize : 0`))
	if err != nil || ctx.Err() != nil {
		return 0
	}
	return int64(v)
}

// screenshot writes what a person sees of the page at the top, at
// 1600x1000, to dist/screenshots/<name>.png: a whole-page shot of 1,000
// cards would be taller than Chromium can render at once.
func (br *dashBrowser) screenshot(ctx context.Context, name string) error {
	root, err := browser.RepoRoot()
	if err != nil {
		return err
	}
	bounded, cancel := context.WithTimeout(br.tab, time.Minute)
	defer cancel()
	if err := chromedp.Do(bounded, chromedp.EmulateViewport(1600, 1000)); err != nil {
		return err
	}
	png, err := chromedp.Run(bounded, chromedp.CaptureScreenshot())
	if err != nil {
		return err
	}
	dir := filepath.Join(root, "dist", "screenshots")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	return errors.Join(os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644), ctx.Err()) //nolint:gosec // a picture for people
}

// pauseWatch is the baseline of the changes: a plain watch of the
// project's StagePauses in the bench's process, noting when each pause
// expected is first seen.
type pauseWatch struct {
	mu      sync.Mutex
	waiting map[string]chan time.Time
	stop    func()
}

// watchPauses starts the watch; stop ends it.
func watchPauses(ctx context.Context, dyn dynamic.Interface, ns string) (*pauseWatch, error) {
	w, err := dyn.Resource(v1alpha1.StagePausesResource).Namespace(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	pw := &pauseWatch{waiting: map[string]chan time.Time{}, stop: w.Stop}
	go func() {
		for ev := range w.ResultChan() {
			at := time.Now()
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok || ev.Type != watch.Added {
				continue
			}
			pw.mu.Lock()
			if ch, ok := pw.waiting[u.GetName()]; ok {
				ch <- at
				delete(pw.waiting, u.GetName())
			}
			pw.mu.Unlock()
		}
	}()
	return pw, nil
}

// expect returns where the watch tells when it first sees the pause name.
func (pw *pauseWatch) expect(name string) <-chan time.Time {
	ch := make(chan time.Time, 1)
	pw.mu.Lock()
	pw.waiting[name] = ch
	pw.mu.Unlock()
	return ch
}

// pauseObject is a StagePause of one Stage, as a person's would be.
func pauseObject(name, stage string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "StagePause",
		"metadata": map[string]any{"name": name, "namespace": dashNS},
		"spec":     map[string]any{"stage": stage, "reason": "BenchDashboard", "message": "timed by make bench"},
	}}
}
