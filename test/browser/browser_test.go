package browser

import (
	"context"
	"fmt"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/chromedp/chromedp/kb"

	"github.com/kargo-latch/kargo-latch/test/cluster"
)

// The tests share one browser, as the e2e tests will: TestMain starts it.
var browserCtx context.Context

func TestMain(m *testing.M) {
	ctx, cancel, err := New(context.Background())
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	browserCtx = ctx
	code := m.Run()
	cancel()
	os.Exit(code)
}

// tab opens a tab of its own for t, closed when t ends; its actions are
// bounded so that a page that never answers fails the test, not the run.
func tab(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := chromedp.NewContext(browserCtx)
	t.Cleanup(cancel)
	if err := chromedp.Do(ctx); err != nil { // opens the tab, without a deadline
		t.Fatal(err)
	}
	ctx, cancelTimeout := context.WithTimeout(ctx, 30*time.Second)
	t.Cleanup(cancelTimeout)
	return ctx
}

// serve serves page at / on loopback, with the Content-Security-Policy the
// dashboard will have: nothing inline, scripts from the page's origin only.
func serve(t *testing.T, page, script string) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/{$}", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, page)
	})
	mux.HandleFunc("/app.js", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		fmt.Fprint(w, script)
	})
	// Answered so that the browser's own request for it logs no 404.
	mux.HandleFunc("/favicon.ico", func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

const buttonPage = `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>latch</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body { font: 16px sans-serif; margin: 2em } button { font-size: 1.2em; padding: .4em 1em }</style>
<script src="/app.js" defer></script></head>
<body><h1>Stage test</h1><p id="state">Latched</p><button id="toggle" type="button">Resume</button></body></html>`

// Each press toggles the state, so a keyboard press then a click show two
// distinct texts.
const buttonScript = `document.getElementById("toggle").addEventListener("click", () => {
  const s = document.getElementById("state");
  s.textContent = s.textContent === "Resumed" ? "Latched again" : "Resumed";
});`

func TestButtonByKeyboardAndMouse(t *testing.T) {
	start := time.Now()
	ctx := tab(t)
	url := serve(t, buttonPage, buttonScript)
	console, err := CaptureConsole(ctx)
	if err != nil {
		t.Fatal(err)
	}
	text := func() string {
		t.Helper()
		s, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("state")))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.ID("toggle"))); err != nil {
		t.Fatal(err)
	}
	if got := text(); got != "Latched" {
		t.Fatalf("state before any press: %q, want Latched", got)
	}

	// The keyboard as a person uses it: Tab moves the focus to the page's
	// only button, Enter presses it.
	if err := chromedp.Do(ctx, chromedp.KeyEvent(kb.Tab)); err != nil {
		t.Fatal(err)
	}
	focused, err := chromedp.Run(ctx, chromedp.Evaluate[string]("document.activeElement.id"))
	if err != nil {
		t.Fatal(err)
	}
	if focused != "toggle" {
		t.Fatalf("Tab focused %q, want the button", focused)
	}
	if err := chromedp.Do(ctx, chromedp.KeyEvent(kb.Enter)); err != nil {
		t.Fatal(err)
	}
	if got := text(); got != "Resumed" {
		t.Fatalf("state after Enter: %q, want Resumed", got)
	}

	// The mouse: chromedp.Click moves to the button's centre and clicks.
	if err := chromedp.Do(ctx, chromedp.Click(chromedp.ID("toggle"))); err != nil {
		t.Fatal(err)
	}
	if got := text(); got != "Latched again" {
		t.Fatalf("state after the click: %q, want Latched again", got)
	}

	if err := Screenshot(ctx, "browser-test"); err != nil {
		t.Fatal(err)
	}
	checkPNG(t, "browser-test", 1280)
	if err := chromedp.Do(ctx, Phone(), chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("toggle"))); err != nil {
		t.Fatal(err)
	}
	if err := Screenshot(ctx, "browser-test-phone"); err != nil {
		t.Fatal(err)
	}
	checkPNG(t, "browser-test-phone", 390*3)

	if err := console.Check(ctx); err != nil {
		t.Error(err)
	}
	t.Logf("took %s", time.Since(start).Round(time.Millisecond))
}

// checkPNG checks the screenshot is a PNG as wide as the viewport.
func checkPNG(t *testing.T, name string, width int) {
	t.Helper()
	root, err := cluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(filepath.Join(root, "dist", "screenshots", name+".png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cfg, err := png.DecodeConfig(f)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if cfg.Width != width {
		t.Errorf("%s is %dx%d, want a width of %d", name, cfg.Width, cfg.Height, width)
	}
}

// The capture must see what the dashboard's tests will assert never happens:
// a console.error, an uncaught exception and a script the CSP refuses.
func TestConsoleCatchesErrors(t *testing.T) {
	ctx := tab(t)
	page := `<!doctype html><html><head><script src="/app.js"></script>
<script>document.title = "inline scripts are refused"</script></head><body>x</body></html>`
	script := `console.error("deliberate", 42); console.log("fine"); setTimeout(() => { throw new Error("boom") });`
	url := serve(t, page, script)
	console, err := CaptureConsole(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		t.Fatal(err)
	}
	// The thrown error comes from a timer: wait for it.
	deadline := time.Now().Add(10 * time.Second)
	for len(console.Errors()) < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	err = console.Check(ctx)
	if err == nil {
		t.Fatal("Check found no error")
	}
	for _, want := range []string{"console.error: deliberate 42", "exception: Uncaught Error: boom", "Content Security Policy"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Check's error lacks %q:\n%v", want, err)
		}
	}
	t.Logf("recorded, as they should be: %v", err)
	if strings.Contains(err.Error(), "fine") {
		t.Errorf("console.log was taken for an error:\n%v", err)
	}
}

// A machine without Chromium gets told what to run, and a wrong
// KARGO_LATCH_CHROMIUM is named.
func TestMissingChromiumSaysMakeBrowser(t *testing.T) {
	saved := candidates
	t.Cleanup(func() { candidates = saved })
	candidates = []string{filepath.Join(t.TempDir(), "chromium")}
	t.Setenv("PATH", t.TempDir())
	t.Setenv(ChromiumEnv, "")
	if _, _, err := New(context.Background()); err == nil || !strings.Contains(err.Error(), "make browser") {
		t.Errorf("New without Chromium: %v, want an error saying to run make browser", err)
	}
	t.Setenv(ChromiumEnv, candidates[0])
	if _, err := Chromium(); err == nil || !strings.Contains(err.Error(), ChromiumEnv) {
		t.Errorf("Chromium with a missing $%s: %v, want an error naming it", ChromiumEnv, err)
	}
}

// cancel leaves nothing behind: the browser's process and its fresh profile
// directory are gone when it returns, so that runs do not pile up profiles
// in /tmp. Started apart from the shared browser, whose cancel is TestMain's.
func TestCancelRemovesTheProfile(t *testing.T) {
	ctx, cancel, err := New(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer cancel()
	proc := chromedp.FromContext(ctx).Browser.Process()
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", proc.Pid))
	if err != nil {
		t.Fatal(err)
	}
	var profile string
	for arg := range strings.SplitSeq(string(cmdline), "\x00") {
		if dir, ok := strings.CutPrefix(arg, "--user-data-dir="); ok {
			profile = dir
		}
	}
	if _, err := os.Stat(profile); profile == "" || err != nil {
		t.Fatalf("the browser's profile %q: %v", profile, err)
	}
	cancel()
	if _, err := os.Stat(profile); !os.IsNotExist(err) {
		t.Errorf("the profile %s is still there after cancel: %v", profile, err)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", proc.Pid)); !os.IsNotExist(err) {
		t.Errorf("the browser (pid %d) still runs after cancel", proc.Pid)
	}
}
