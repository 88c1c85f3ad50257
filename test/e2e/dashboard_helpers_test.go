package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"github.com/kargo-latch/kargo-latch/cli/dashboard"
	"github.com/kargo-latch/kargo-latch/test/browser"
	"github.com/kargo-latch/kargo-latch/test/cluster"
)

// dashboardProcess is the real `kargo-latch dashboard` (bin/kargo-latch, which
// `make build`, and so `make e2e`, writes) serving one project as a person
// with their own kubeconfig.
type dashboardProcess struct {
	url  string // http://localhost:PORT/, as its first line says
	port string
	out  outputBuffer // its stdout after the first line, and its stderr
}

// dashboardReady is the dashboard's first line of stdout.
var dashboardReady = regexp.MustCompile(`^` + regexp.QuoteMeta(dashboard.ServingPrefix) + `(http://localhost:(\d+)/) \(`)

// startDashboard runs the dashboard for project ns (-n) as cfg's user on a
// free port, and stops it when the test ends (after the test's tabs are
// closed).
func startDashboard(t *testing.T, cfg *rest.Config, ns string) *dashboardProcess {
	t.Helper()
	return runDashboard(t, writeKubeconfig(t, cfg), "-n", ns)
}

// startDashboardIn runs the dashboard without -n, as cfg's user with a
// kubeconfig whose namespace is ns, as a person bound in one project runs
// it.
// openDashboard starts the dashboard as cfg's user for project ns and
// opens it in a new tab of the shared browser, its feed drawn.
func openDashboard(t *testing.T, cfg *rest.Config, ns string) *tab {
	t.Helper()
	d := startDashboard(t, cfg, ns)
	page := sharedBrowser(t).newTab(t)
	page.open(d.url)
	return page
}

func startDashboardIn(t *testing.T, cfg *rest.Config, ns string) *dashboardProcess {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	must(t, cluster.WriteKubeconfig(path, cfg, ns))
	return runDashboard(t, path)
}

// runDashboard runs bin/kargo-latch dashboard with the kubeconfig and the
// flags given, on a free port.
func runDashboard(t *testing.T, kubeconfig string, flags ...string) *dashboardProcess {
	t.Helper()
	bin := filepath.Join(env.cluster.Root, "bin", "kargo-latch")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%v: run `make build` (make e2e does) first", err)
	}
	d := &dashboardProcess{}
	cmd := exec.Command(bin, append([]string{"dashboard", "--kubeconfig", kubeconfig, "--port", "0"}, flags...)...)
	stdout, w, err := os.Pipe()
	must(t, err)
	cmd.Stdout, cmd.Stderr = w, &d.out
	must(t, cmd.Start())
	_ = w.Close()
	lines := make(chan string, 1)
	go func() { // the first line, then the rest into d.out
		r := bufio.NewReader(stdout)
		line, _ := r.ReadString('\n')
		lines <- strings.TrimSuffix(line, "\n")
		_, _ = io.Copy(&d.out, r)
		_ = stdout.Close()
	}()
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			t.Errorf("the dashboard did not stop within 5s of SIGINT")
		}
		if t.Failed() {
			t.Logf("the dashboard's output:\n%s", d.out.String())
		}
	})
	var line string
	select {
	case line = <-lines:
	case <-exited:
		t.Fatalf("the dashboard exited before serving: %s", d.out.String())
	case <-time.After(waitLimit):
		t.Fatalf("the dashboard did not say where it serves within %v: %s", waitLimit, d.out.String())
	}
	m := dashboardReady.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("the dashboard's first line %q, want %q; then: %s", line, dashboardReady, d.out.String())
	}
	d.url, d.port = m[1], m[2]
	return d
}

// token reads the page's per-process token from its HTML, as the page does.
func (d *dashboardProcess) token(t *testing.T) string {
	t.Helper()
	res, err := http.Get(d.url)
	must(t, err)
	defer func() { _ = res.Body.Close() }()
	b, err := io.ReadAll(res.Body)
	must(t, err)
	m := regexp.MustCompile(`<meta name="kargo-latch-token" content="([^"]+)">`).FindSubmatch(b)
	if res.StatusCode != http.StatusOK || m == nil {
		t.Fatalf("GET %s: %s, no token in %q", d.url, res.Status, b)
	}
	return string(m[1])
}

// chromium is the package's one headless Chromium, in which each test
// opens tabs of its own: CI's two cores run one browser, not one per
// parallel test.
type chromium struct{ ctx context.Context }

// theBrowser is started by the first test that asks for it, and stopped by
// stopBrowser when every test has run (TestMain's run).
var theBrowser struct {
	mu      sync.Mutex
	started bool
	ctx     context.Context
	cancel  context.CancelFunc
	err     error
}

// sharedBrowser returns the package's Chromium, started on the first call.
func sharedBrowser(t *testing.T) chromium {
	t.Helper()
	theBrowser.mu.Lock()
	defer theBrowser.mu.Unlock()
	if !theBrowser.started {
		theBrowser.started = true
		theBrowser.ctx, theBrowser.cancel, theBrowser.err = browser.New(context.Background())
	}
	must(t, theBrowser.err)
	return chromium{theBrowser.ctx}
}

// stopBrowser stops the package's Chromium, if a test started it, and
// waits until it is gone.
func stopBrowser() {
	theBrowser.mu.Lock()
	defer theBrowser.mu.Unlock()
	if theBrowser.cancel != nil {
		theBrowser.cancel()
		theBrowser.cancel = nil
	}
}

// tab is one browser tab of a test, whose console errors are recorded from
// its first page on and checked when the test ends, before it closes.
type tab struct {
	t       *testing.T
	ctx     context.Context
	console *browser.Console
	// expected: the console errors the test provokes, by part of their text.
	expected []string
}

// newTab opens a tab whose console errors fail the test.
func (c chromium) newTab(t *testing.T) *tab {
	t.Helper()
	b := c.openTab(t)
	t.Cleanup(func() {
		// Check's round trip brings in what the page logged so far; bounded,
		// as a page still loading never answers it.
		check, cancel := context.WithTimeout(b.ctx, 10*time.Second)
		err := b.console.Check(check)
		cancel()
		if n := len(b.console.Errors()) - len(b.unexpected()); n > 0 {
			t.Logf("the page logged %d error(s) the test provoked: %q", n, b.console.Errors())
		}
		if errs := b.unexpected(); len(errs) > 0 {
			t.Errorf("the page logged %d error(s):\n  %s", len(errs), strings.Join(errs, "\n  "))
		} else if err != nil && len(b.console.Errors()) == 0 {
			t.Errorf("console: %v", err)
		}
	})
	return b
}

// openTab opens a tab whose console errors are recorded but not checked:
// another site's page.
func (c chromium) openTab(t *testing.T) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(c.ctx)
	t.Cleanup(cancel)
	must(t, chromedp.Do(ctx)) // opens the tab, without a deadline
	console, err := browser.CaptureConsole(ctx)
	must(t, err)
	return &tab{t: t, ctx: ctx, console: console}
}

// expect declares a console error the test provokes, by part of its text.
func (b *tab) expect(part string) { b.expected = append(b.expected, part) }

// unexpected are the console errors not declared with expect.
func (b *tab) unexpected() []string {
	var out []string
next:
	for _, e := range b.console.Errors() {
		for _, part := range b.expected {
			if strings.Contains(e, part) {
				continue next
			}
		}
		out = append(out, e)
	}
	return out
}

// do runs actions, each run bounded by waitLimit.
func (b *tab) do(actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, waitLimit)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatal(err)
	}
}

// evalJS evaluates a JavaScript expression in the tab's page.
func evalJS[T any](b *tab, expr string) T {
	b.t.Helper()
	v, err := tryJS[T](b, expr)
	if err != nil {
		b.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

func tryJS[T any](b *tab, expr string) (T, error) {
	ctx, cancel := context.WithTimeout(b.ctx, waitLimit)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](expr))
}

// waitJS polls a JavaScript condition until it holds, for at most waitLimit.
func (b *tab) waitJS(what, cond string) {
	b.t.Helper()
	if err := poll(what, func() (bool, error) { return tryJS[bool](b, "Boolean("+cond+")") }); err != nil {
		main, _ := tryJS[string](b, `document.querySelector("main")?.innerText ?? ""`)
		b.t.Fatalf("%v\nthe page says: %s", err, main)
	}
}

// js quotes s as a JavaScript string.
func js(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// text is the text content of the first element sel matches ("" if none).
func (b *tab) text(sel string) string {
	b.t.Helper()
	return evalJS[string](b, fmt.Sprintf(`document.querySelector(%s)?.textContent ?? ""`, js(sel)))
}

// waitText waits until the element sel matches has a text that holds want.
func (b *tab) waitText(sel, want string) {
	b.t.Helper()
	b.waitJS(fmt.Sprintf("%s to say %q", sel, want),
		fmt.Sprintf(`(document.querySelector(%s)?.textContent ?? "").includes(%s)`, js(sel), js(want)))
}

// waitBadge waits until a Stage's card says want in its paused badge
// ("Paused — Incident", "Not paused"), with or without the icon before
// the words (a character or drawn by the style sheet).
func (b *tab) waitBadge(ns, stage, want string) {
	b.t.Helper()
	b.waitJS(fmt.Sprintf("the card of %s to say %q", stage, want),
		fmt.Sprintf(`(document.querySelector(%s)?.textContent ?? "").trim().replace(/^[⏸▶]\uFE0F?\s*/u, "") === %s`, js(field(ns, stage, "paused")), js(want)))
}

// open navigates to the dashboard's url and waits until its live feed is
// connected and has drawn the page.
func (b *tab) open(url string) {
	b.t.Helper()
	nav, cancel := context.WithTimeout(b.ctx, waitLimit)
	defer cancel()
	if err := chromedp.Do(nav, chromedp.Navigate(url)); err != nil {
		b.t.Fatalf("loading %s: %v", url, err)
	}
	// The page is drawn once the feed is live and its first message drawn:
	// a script error on the way (a feed that began before every script
	// had run) is caught by the console check.
	drawn := func() (bool, error) {
		return tryJS[bool](b, `Boolean(document.querySelector('#conn[data-state="live"]') && !document.querySelector('main > p:only-child')?.textContent.startsWith('Loading'))`)
	}
	err := poll("the live feed to connect and draw the page", drawn)
	must(b.t, err)
}

// screenshot writes dist/screenshots/<name>.png.
func (b *tab) screenshot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, waitLimit)
	defer cancel()
	must(b.t, browser.Screenshot(ctx, name))
}

// card is the selector of a Stage's card, field that of one of its fields.
func card(ns, stage string) string { return fmt.Sprintf(`article[data-stage="%s/%s"]`, ns, stage) }

func field(ns, stage, name string) string {
	return card(ns, stage) + fmt.Sprintf(` [data-field="%s"]`, name)
}

// onePause is the project's only StagePause.
func onePause(t *testing.T, ns string) unstructured.Unstructured {
	t.Helper()
	pauses := env.listPauses(t, ns)
	if len(pauses) != 1 {
		t.Fatalf("%d StagePauses in %s, want 1", len(pauses), ns)
	}
	return pauses[0]
}

// spec reads a string of a StagePause's spec.
func spec(p unstructured.Unstructured, name string) string {
	s, _, _ := unstructured.NestedString(p.Object, "spec", name)
	return s
}

// markPaused sets window.__mark and makes the page note in
// window.__pausedAt (ms since the epoch) when the badge sel first says
// Paused; it returns window.__pausedAt, 0 while it does not.
func markPaused(sel string) string {
	return fmt.Sprintf(`(() => {
  window.__mark = 1;
  window.__pausedAt = 0;
  const check = () => {
    const text = document.querySelector(%s)?.textContent ?? "";
    if (!window.__pausedAt && /^\W*Paused/u.test(text.trim())) window.__pausedAt = Date.now();
  };
  new MutationObserver(check).observe(document.getElementById("main"), { childList: true, subtree: true, characterData: true });
  check();
  return window.__pausedAt;
})()`, js(sel))
}

// focused reports whether the focus is on the element sel matches.
func (b *tab) focused(sel string) bool {
	b.t.Helper()
	return evalJS[bool](b, fmt.Sprintf(`document.activeElement?.matches(%s) ?? false`, js(sel)))
}

// tooWide says how the page is wider than the screen, or "" when it
// scrolls only down.
func (b *tab) tooWide() string {
	b.t.Helper()
	// clientWidth is the layout viewport's; a phone's browser zooms out
	// to show a wider page, and then innerWidth grows with it.
	w := evalJS[[]int](b, `[document.documentElement.scrollWidth, document.documentElement.clientWidth]`)
	if w[0] <= w[1] {
		return ""
	}
	wide := evalJS[[]string](b, `[...document.querySelectorAll("main *")].filter((e) => e.getBoundingClientRect().right > document.documentElement.clientWidth + 1)
  .slice(-4).map((e) => e.tagName + " " + Math.round(e.getBoundingClientRect().width) + "px: " + e.textContent.trim().slice(0, 50))`)
	return fmt.Sprintf("%dpx wide on a %dpx screen; wider than the screen: %q", w[0], w[1], wide)
}
