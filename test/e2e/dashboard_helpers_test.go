package e2e

import (
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

	"github.com/kargo-latch/kargo-latch/test/browser"
)

// dashboard is the real `kargo-latch dashboard` (bin/kargo-latch, which
// `make build`, and so `make e2e`, writes) serving one project as a person
// with their own kubeconfig.
type dashboard struct {
	url  string // http://localhost:PORT/, as its first line says
	port string
	out  outputBuffer // its stdout after the first line, and its stderr
}

// dashboardReady is the dashboard's first line of stdout.
var dashboardReady = regexp.MustCompile(`^kargo-latch dashboard: (http://localhost:(\d+)/) \(`)

// firstLine is a process's stdout: it hands the first line over once, and
// keeps the rest.
type firstLine struct {
	rest  *outputBuffer
	mu    sync.Mutex
	buf   []byte
	sent  bool
	lines chan string
}

func (f *firstLine) Write(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.sent {
		return f.rest.Write(p)
	}
	f.buf = append(f.buf, p...)
	if line, rest, ok := strings.Cut(string(f.buf), "\n"); ok {
		f.sent = true
		f.lines <- line
		_, _ = f.rest.Write([]byte(rest))
	}
	return len(p), nil
}

// startDashboard runs the dashboard for project ns as cfg's user on a free
// port, and stops it when the test ends (after the test's tabs are closed).
func startDashboard(t *testing.T, cfg *rest.Config, ns string) *dashboard {
	t.Helper()
	bin := filepath.Join(env.cluster.Root, "bin", "kargo-latch")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%v: run `make build` (make e2e does) first", err)
	}
	d := &dashboard{}
	stdout := &firstLine{rest: &d.out, lines: make(chan string, 1)}
	cmd := exec.Command(bin, "dashboard", "--kubeconfig", writeKubeconfig(t, cfg), "-n", ns, "--port", "0")
	cmd.Stdout, cmd.Stderr = stdout, &d.out
	must(t, cmd.Start())
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
	case line = <-stdout.lines:
	case <-exited:
		t.Fatalf("the dashboard exited before serving: %s", d.out.String())
	case <-time.After(waitLimit):
		t.Fatalf("the dashboard did not say where it serves within %v: %s", waitLimit, d.out.String())
	}
	m := dashboardReady.FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("the dashboard's first line %q, want %q", line, dashboardReady)
	}
	d.url, d.port = m[1], m[2]
	return d
}

// token reads the page's per-process token from its HTML, as the page does.
func (d *dashboard) token(t *testing.T) string {
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

// newBrowser starts a headless Chromium of the test's own, stopped when the
// test ends.
func newBrowser(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel, err := browser.New(context.Background())
	must(t, err)
	t.Cleanup(cancel)
	return ctx
}

// tab is one browser tab of a test, whose console errors are recorded from
// its first page on and checked when the test ends, before it closes.
type tab struct {
	t       *testing.T
	ctx     context.Context
	console *browser.Console
	// expected are the console errors the test provokes on purpose, by a
	// part of their text; any other fails the test.
	expected []string
}

// newTab opens a tab whose console errors fail the test.
func newTab(t *testing.T, browserCtx context.Context) *tab {
	t.Helper()
	b := openTab(t, browserCtx)
	t.Cleanup(func() {
		// Check's round trip brings in what the page logged so far.
		err := b.console.Check(b.ctx)
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
func openTab(t *testing.T, browserCtx context.Context) *tab {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browserCtx)
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
	b.do(chromedp.Navigate(url))
	b.waitJS("the live feed to connect", `document.querySelector('#conn[data-state="live"]') && !document.querySelector('main > p:only-child')?.textContent.startsWith('Loading')`)
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
