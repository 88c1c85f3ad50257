package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/performance"
	"github.com/chromedp/chromedp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/test/browser"
	"github.com/kargo-latch/kargo-latch/test/cluster"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// observerJS runs in each tab before the page's own scripts (the page's
// Content-Security-Policy does not apply to it). It notes when each message
// of the live feed arrives (its listener comes before the page's onmessage,
// so before the parse and render), and offers two promises, each resolved
// from a MutationObserver, not by polling:
//   - cards: every card in the DOM, and the end of the frame that paints
//     them (a requestAnimationFrame callback runs before the frame's style,
//     layout and paint; a message posted from it is handled after them);
//   - waits[key], made by expect(key): the card of Stage key says "Paused"
//     (or "⏸ Paused"), and the end of the frame that paints it.
//
// cards' times are performance.now(), from the navigation's start; waits'
// are epoch milliseconds (performance.timeOrigin + performance.now()).
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
  const afterPaint = (f) => requestAnimationFrame(() => { const c = new MessageChannel(); c.port1.onmessage = f; c.port2.postMessage(null); });
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
        if (!el || !/^(\u23f8\s*)?Paused/.test(el.textContent.trim())) return;
        obs.disconnect();
        const dom = performance.now(), m = B.msgs[B.msgs.length - 1];
        afterPaint(() => resolve({ message: B.msgs.length > from ? epoch(m.at) : 0, dom: epoch(dom), painted: epoch(performance.now()) }));
      });
      obs.observe(document.getElementById('main'), { childList: true, subtree: true, characterData: true });
    });
    return true;
  };
})();`

// dashBrowser is the Chromium of the figures, and the tab kept for changes.
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
	work                  mainThread
}

// pageTimes are a page's times in milliseconds, as observerJS gives them.
type pageTimes struct {
	Message float64 `json:"message"`
	DOM     float64 `json:"dom"`
	Painted float64 `json:"painted"`
	Bytes   int     `json:"bytes"`
}

// firstPage opens the page in a new tab and times it; keep keeps the tab.
func (br *dashBrowser) firstPage(keep bool) (firstPage, error) {
	tab, closeTab := chromedp.NewContext(br.root)
	if err := chromedp.Do(tab); err != nil { // opens the tab, without a deadline
		closeTab()
		return firstPage{}, err
	}
	console, err := browser.CaptureConsole(tab)
	if err == nil {
		err = chromedp.Do(tab, chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
			if _, err := cdp.Call(ctx, t, performance.Enable, performance.EnableParams{}); err != nil {
				return err
			}
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
	var work mainThread
	if err == nil {
		work, err = mainThreadOf(tab)
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
	return firstPage{message: d(got.Message), dom: d(got.DOM), painted: d(got.Painted), bytes: got.Bytes, work: work}, nil
}

// mainThread is what the tab's main thread did so far, by Chromium's own
// counters (Performance.getMetrics): JavaScript, style, layout, and all of
// its tasks (those, and paint and the rest); and the page's size.
type mainThread struct {
	script, style, layout, tasks time.Duration
	nodes, layoutObjects, heap   int
}

func mainThreadOf(tab context.Context) (mainThread, error) {
	r, err := chromedp.Run(tab, func(ctx context.Context, t *chromedp.Target) (performance.GetMetricsResult, error) {
		return cdp.Call(ctx, t, performance.GetMetrics, cdp.Empty{})
	})
	v := map[string]float64{}
	for _, x := range r.Metrics {
		v[x.Name] = x.Value
	}
	d := func(name string) time.Duration { return time.Duration(v[name] * float64(time.Second)) }
	return mainThread{script: d("ScriptDuration"), style: d("RecalcStyleDuration"), layout: d("LayoutDuration"), tasks: d("TaskDuration"),
		nodes: int(v["Nodes"]), layoutObjects: int(v["LayoutObjects"]), heap: int(v["JSHeapUsedSize"])}, err
}

func (m mainThread) since(o mainThread) mainThread {
	return mainThread{script: m.script - o.script, style: m.style - o.style, layout: m.layout - o.layout, tasks: m.tasks - o.tasks,
		nodes: m.nodes, layoutObjects: m.layoutObjects, heap: m.heap}
}

func (m mainThread) String() string {
	return fmt.Sprintf("JavaScript %v, style %v, layout %v; all tasks %v (%d DOM nodes, %d layout objects, JS heap %s)",
		ms(m.script), ms(m.style), ms(m.layout), ms(m.tasks), m.nodes, m.layoutObjects, mb(int64(m.heap)))
}

// sayFirstPageSplit splits the first pages: the full message in, the parse
// and render to the DOM, then style, layout and paint.
func sayFirstPageSplit(pages []firstPage) {
	var msg, render, paint []time.Duration
	for _, p := range pages {
		msg, render, paint = append(msg, p.message), append(render, p.dom-p.message), append(paint, p.painted-p.dom)
	}
	say("   split: navigation → full message in %v; → every card in the DOM (JSON.parse, render) %v; → painted (style, layout, paint) %v",
		percentiles(msg).withP95(), percentiles(render).withP95(), percentiles(paint).withP95())
	for i, p := range pages {
		say("   tab %d's main thread until painted: %v", i+1, p.work)
	}
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

// shown is a change as the page saw it, on the bench's clock.
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

// screenshot writes what a person sees of the page at the top, at
// 1600x1000, to dist/screenshots/<name>.png: a whole-page shot of 1,000
// cards would be taller than Chromium can render at once.
func (br *dashBrowser) screenshot(ctx context.Context, name string) error {
	root, err := cluster.RepoRoot()
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
	return errors.Join(os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644), ctx.Err())
}

// changes are the page's and the plain watch's latencies, from the create.
type changes struct{ page, watch []time.Duration }

// dashboardChanges pauses random Stages, one at a time, each timed from
// the moment the API server answered the create to the card painted
// paused (the page's clock, compared with the bench's on this machine)
// and to a plain watch's event.
func (b *bench) dashboardChanges(ctx context.Context, br *dashBrowser, stages []*driver.Stage) (changes, error) {
	seen, stop, err := watchPauses(ctx, b.dyn, dashNS)
	if err != nil {
		return changes{}, err
	}
	defer stop()
	offset, rtt, err := br.clockOffset(ctx)
	if err != nil {
		return changes{}, err
	}
	say("   the page's clock is %v ahead of the bench's (± %v, half the best of 10 round trips)", offset, rtt/2)
	before, err := mainThreadOf(br.tab)
	if err != nil {
		return changes{}, err
	}
	var c changes
	var request, server, parse, paint, sinceStamp []time.Duration
	perColumn := (len(stages) + dashColumns - 1) / dashColumns
	order := rand.Perm(len(stages))                              //nolint:gosec // which Stages, not security
	top := slices.Index(order, rand.IntN(dashColumns)*perColumn) //nolint:gosec // which Stages, not security
	if top > 0 {
		order[0], order[top] = order[top], order[0] // the first on the top row, for the screenshot
	}
	for i, k := range order[:min(*dashChanges, len(order))] {
		s := stages[k]
		name := fmt.Sprintf("bench-dashboard-%02d", i)
		key := dashNS + "/" + s.Name
		if err := br.expectPaused(ctx, key); err != nil {
			return c, err
		}
		sent := time.Now()
		created, err := b.dyn.Resource(v1alpha1.StagePausesResource).Namespace(dashNS).Create(ctx, pauseObject(name, s.Name), metav1.CreateOptions{})
		if err != nil {
			return c, err
		}
		accepted := time.Now()
		request = append(request, accepted.Sub(sent))
		var watched seenPause
		for watched.name != name {
			select {
			case watched = <-seen:
			case <-time.After(time.Minute):
				return c, fmt.Errorf("the watch never saw StagePause %s", name)
			}
		}
		shown, err := br.waitPaused(ctx, key, offset)
		if err != nil {
			return c, err
		}
		c.page, c.watch = append(c.page, shown.painted.Sub(accepted)), append(c.watch, watched.at.Sub(accepted))
		server, parse, paint = append(server, shown.message.Sub(accepted)), append(parse, shown.dom.Sub(shown.message)), append(paint, shown.painted.Sub(shown.dom))
		sinceStamp = append(sinceStamp, shown.painted.Sub(created.GetCreationTimestamp().Time))
		time.Sleep(300 * time.Millisecond)
	}
	if after, err := mainThreadOf(br.tab); err == nil {
		w := after.since(before)
		say("   the page's main thread during the changes (its 5 s refresh of the times included), per change: JavaScript %v, style %v, layout %v; all tasks %v",
			ms(w.script/time.Duration(len(c.page))), ms(w.style/time.Duration(len(c.page))), ms(w.layout/time.Duration(len(c.page))), ms(w.tasks/time.Duration(len(c.page))))
	}
	say("   the create's round trip (before the figures' start) %v", percentiles(request).withP95())
	say("   split: the create's answer → the page's message in %v; → the card in the DOM (parse, render) %v; → painted %v",
		percentiles(server).withP95(), percentiles(parse).withP95(), percentiles(paint).withP95())
	say("   painted − the StagePause's creationTimestamp (whole seconds, so up to 1 s more): %v", percentiles(sinceStamp).withP95())
	return c, nil
}

// seenPause is a StagePause a plain watch saw added, and when.
type seenPause struct {
	name string
	at   time.Time
}

// watchPauses is the baseline of the changes: a plain watch of the
// project's StagePauses in the bench's process, which tells each pause
// added and when it arrived, until stop.
func watchPauses(ctx context.Context, dyn dynamic.Interface, ns string) (<-chan seenPause, func(), error) {
	w, err := dyn.Resource(v1alpha1.StagePausesResource).Namespace(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, err
	}
	seen := make(chan seenPause, 100)
	go func() {
		for ev := range w.ResultChan() {
			if u, ok := ev.Object.(*unstructured.Unstructured); ok && ev.Type == watch.Added {
				select {
				case seen <- seenPause{u.GetName(), time.Now()}:
				default:
				}
			}
		}
	}()
	return seen, w.Stop, nil
}

// pauseObject is a StagePause of one Stage, as a person's would be.
func pauseObject(name, stage string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "StagePause",
		"metadata": map[string]any{"name": name, "namespace": dashNS},
		"spec":     map[string]any{"stage": stage, "reason": "BenchDashboard", "message": "timed by make bench"},
	}}
}
