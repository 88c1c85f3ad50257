// Package browser drives a real headless Chromium (Debian's, which `make
// browser` installs) for the tests and the bench that look at a web page:
// New starts one browser per test or program, each test opens its tabs with
// chromedp.NewContext on it, Screenshot writes what a person would see into
// dist/screenshots, and CaptureConsole lets a test assert the page logged no
// error.
package browser

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/kargo-latch/kargo-latch/test/cluster"
)

// ChromiumEnv names the environment variable that picks the browser binary
// over the places Chromium is looked for.
const ChromiumEnv = "KARGO_LATCH_CHROMIUM"

// candidates are where Debian's packages put Chromium, in order. The real
// binary under /usr/lib comes before Debian's launcher /usr/bin/chromium: the
// launcher is a shell script that sources /etc/chromium.d, which adds flags
// of its own (--enable-gpu-rasterization, --enable-remote-extensions, an
// empty --load-extension) and, on a machine with two mounts at /dev/shm,
// prints "[: ...: unexpected operator" from its free-space check. The flags
// below are then all the browser runs with.
var candidates = []string{
	"/usr/lib/chromium/chromium",
	"/usr/bin/chromium",
	"/usr/bin/chromium-headless-shell",
}

// startTimeout bounds the browser's start. Chromium talks over a pipe here,
// which has no time-out of its own, and a browser that hangs at start would
// otherwise hang the test until go test's -timeout.
const startTimeout = 60 * time.Second

// Chromium returns the path of the browser binary: $KARGO_LATCH_CHROMIUM when
// set (a path or a name on PATH), else the first of Debian's places that
// exists, else `chromium` on PATH.
func Chromium() (string, error) {
	if p := os.Getenv(ChromiumEnv); p != "" {
		// A path, or a name looked up on PATH; either must be executable.
		path, err := exec.LookPath(p)
		if err != nil {
			return "", fmt.Errorf("%s=%s: %w", ChromiumEnv, p, err)
		}
		return path, nil
	}
	for _, p := range candidates {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	if p, err := exec.LookPath("chromium"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("no Chromium found (looked at $%s, %s and PATH): run `make browser`, which installs Debian's chromium",
		ChromiumEnv, strings.Join(candidates, ", "))
}

// New starts a headless Chromium and returns a context of its first tab.
// Each test opens its own tabs with chromedp.NewContext(browserCtx): they
// share the browser, so starting it (0.7-0.9 s here) is paid once. The
// browser lives until cancel, or until ctx ends; cancel waits until the
// process and its children are gone and the profile directory is removed.
func New(ctx context.Context) (browserCtx context.Context, cancel context.CancelFunc, err error) {
	path, err := Chromium()
	if err != nil {
		return nil, nil, err
	}
	output := &tail{max: 8 << 10}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.Headless,
		// The tests run as root, where Chromium refuses its sandbox.
		chromedp.NoSandbox,
		// No GPU on these machines: software rendering, without probing.
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		// The machine reaches no network but loopback: without these the
		// browser keeps trying Google's services in the background
		// (component updates, sync, field trials, QUIC probes), each a
		// time-out and log noise, and never needed by a page on 127.0.0.1.
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("no-pings", true),
		// Keeps chromedp's default list (Translate, BlinkGenPropertyTrees)
		// and adds the services that would fetch from the network.
		chromedp.Flag("disable-features", "Translate,BlinkGenPropertyTrees,OptimizationHints,MediaRouter,AutofillServerCommunication,CertificateTransparencyComponentUpdater"),
		// With all the flags above, Chromium 156 still looks up
		// accounts.google.com, clients2.google.com and
		// update.googleapis.com at start (seen with strace): no name
		// resolves but loopback's (localhost, 127.*, [::1]), so no DNS
		// query leaves the machine. Pages under test are on loopback.
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE localhost, EXCLUDE 127.*, EXCLUDE [::1]"),
		chromedp.WindowSize(1280, 900),
		// chromedp makes a fresh profile directory for each browser when no
		// user-data-dir is set, and its cancel removes it after killing any
		// child process still using it: a directory of our own would be
		// removed without that, so none is given here.
		chromedp.CombinedOutput(output),
	)
	allocCtx, allocCancel := chromedp.NewExecAllocator(ctx, opts...)
	tabCtx, tabCancel := chromedp.NewContext(allocCtx)
	cancel = func() {
		tabCancel()
		allocCancel() // waits for the process and the profile's removal
	}

	// The first Do starts the browser. A timer rather than a deadline on
	// its context: that context's end would stop the browser later too.
	timer := time.AfterFunc(startTimeout, cancel)
	err = chromedp.Do(tabCtx)
	stopped := !timer.Stop()
	if err != nil || stopped {
		cancel()
		if stopped {
			err = fmt.Errorf("did not start within %s", startTimeout)
		}
		var printed string
		if out := output.lines(); out != "" {
			printed = "\nits output:\n" + out
		}
		return nil, nil, fmt.Errorf("starting %s: %w%s", path, err, printed)
	}
	return tabCtx, cancel, nil
}

// Phone emulates a phone held upright: 390x844 CSS pixels at a device scale
// of 3 (an iPhone 12 to 15), with the mobile viewport and touch events, so
// that a screenshot shows the page's narrow layout as a phone renders it.
// chromedp.ResetViewport returns the tab to the window's size.
func Phone() chromedp.Action[chromedp.Void] {
	return chromedp.EmulateViewport(390, 844,
		chromedp.EmulateScale(3),
		chromedp.EmulatePortrait,
		chromedp.EmulateMobile,
		chromedp.EmulateTouch,
	)
}

// Screenshot writes a PNG of the whole page of the tab of ctx (beyond the
// viewport, to its full height) to dist/screenshots/<name>.png in the
// repository, where a person or the file viewer can look at it.
func Screenshot(ctx context.Context, name string) error {
	if name == "" || name != filepath.Base(name) || strings.HasPrefix(name, ".") {
		return fmt.Errorf("screenshot name %q: want a plain file name, without a directory", name)
	}
	root, err := cluster.RepoRoot()
	if err != nil {
		return err
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)) // 100: PNG
	if err != nil {
		return fmt.Errorf("screenshot %s: %w", name, err)
	}
	dir := filepath.Join(root, "dist", "screenshots")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644)
}

// tail keeps the last max bytes the browser printed, for the error when it
// does not start; it is written from chromedp's output goroutine.
type tail struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// lines returns what the browser printed but its complaints about D-Bus,
// which it prints at every start on a machine without one, and harmlessly.
func (t *tail) lines() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	var keep []string
	for line := range strings.SplitSeq(string(t.buf), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.Contains(line, ":ERROR:dbus/") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}

// Console records the errors a tab raised: console.error and failed
// console.assert calls, uncaught exceptions and unhandled rejections, and the
// browser's own error entries, among which a Content-Security-Policy
// violation ("Executing inline script violates the following Content
// Security Policy directive ...", source "security") and a resource that
// failed to load (source "network").
type Console struct {
	mu   sync.Mutex
	errs []string
}

// CaptureConsole starts recording the errors of the tab of ctx. Call it
// before navigating: a message is only seen from then on. It opens the tab
// if ctx has none yet.
func CaptureConsole(ctx context.Context) (*Console, error) {
	c := &Console{}
	// Listen, not chromedp.Console: its func runs in the tab's read loop,
	// in order, so every message the page sent before a command's reply is
	// recorded when the command returns (Check relies on it).
	if err := chromedp.Listen(ctx, c.record); err != nil {
		return nil, fmt.Errorf("listening to the console: %w", err)
	}
	return c, nil
}

// record runs in the tab's read loop: it must be quick and send nothing.
func (c *Console) record(ev any) {
	var msg string
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if ev.Type != runtime.ConsoleAPICalledTypeError && ev.Type != runtime.ConsoleAPICalledTypeAssert {
			return
		}
		msg = "console." + string(ev.Type) + ": " + argsText(ev.Args)
		if st := ev.StackTrace; st != nil && len(st.CallFrames) > 0 {
			f := st.CallFrames[0]
			msg += fmt.Sprintf(" (%s:%d)", f.URL, f.LineNumber+1)
		}
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		msg = "exception: " + d.Text
		if d.Exception != nil {
			// The description of an Error is its message and stack; the
			// first line is enough to find it.
			desc, _, _ := strings.Cut(argsText([]*runtime.RemoteObject{d.Exception}), "\n")
			msg += " " + desc
		}
		if d.URL != "" {
			msg += fmt.Sprintf(" (%s:%d)", d.URL, d.LineNumber+1)
		}
	case *log.EventEntryAdded:
		e := ev.Entry
		if e == nil || e.Level != log.EntryLevelError {
			return
		}
		msg = string(e.Source) + ": " + e.Text
		if e.URL != "" && !strings.Contains(e.Text, e.URL) {
			msg += " (" + e.URL + ")"
		}
	default:
		return
	}
	c.mu.Lock()
	c.errs = append(c.errs, msg)
	c.mu.Unlock()
}

// Errors returns the errors recorded so far, one line each.
func (c *Console) Errors() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.errs...)
}

// Check returns an error listing every error the tab of ctx raised so far,
// or nil. It first makes a round trip to the page, so that the messages of
// what already ran there (a click's handler, a script of the page) are in.
func (c *Console) Check(ctx context.Context) error {
	if _, err := chromedp.Run(ctx, chromedp.Evaluate[chromedp.Void]("0")); err != nil {
		return fmt.Errorf("reaching the page: %w", err)
	}
	errs := c.Errors()
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("the page raised %d error(s):\n  %s", len(errs), strings.Join(errs, "\n  "))
}

// argsText renders console arguments roughly as the DevTools console does:
// strings as they are, other values by their description.
func argsText(args []*runtime.RemoteObject) string {
	parts := make([]string, 0, len(args))
	for _, a := range args {
		var s string
		switch {
		case a == nil:
			s = "null"
		case a.Type == runtime.RemoteObjectTypeString && json.Unmarshal(a.Value, &s) == nil:
		case a.UnserializableValue != "":
			s = string(a.UnserializableValue)
		case a.Description != "":
			s = a.Description
		case len(a.Value) > 0:
			s = string(a.Value)
		default:
			s = string(a.Type)
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, " ")
}
