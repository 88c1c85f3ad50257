package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kargo-latch/kargo-latch/api"
	clidashboard "github.com/kargo-latch/kargo-latch/cli/dashboard"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// dashNS is the dashboard's project: its own Stages, which no operator
// watches, so that nothing but the bench changes them.
const dashNS = "bench-dashboard"

// dashColumns is the depth of the project's pipeline: Stage i requests
// Freight from Stage i-perColumn, so the page lays out this many columns.
const dashColumns = 5

var (
	dashStages  = flag.Int("dashboard-stages", 1000, "dashboard: Stages of its project, busy Stages in a pipeline of 5 columns")
	dashPages   = flag.Int("dashboard-pages", 5, "dashboard: first pages timed, each in a new tab, each next to a run of `status -o json`")
	dashChanges = flag.Int("dashboard-changes", 20, "dashboard: StagePauses timed from the API server's answer to the page")
	dashBinary  = flag.String("dashboard-binary", "", "dashboard: the kargo-latch binary whose dashboard and status are measured instead of bin/kargo-latch (an older build, or one with a change to the page)")
)

// dashCLI is the kargo-latch binary whose dashboard is measured.
func (b *bench) dashCLI() string {
	if *dashBinary != "" {
		return *dashBinary
	}
	return binPath(b.c, "kargo-latch")
}

// dashboard measures `kargo-latch dashboard` over one project of
// -dashboard-stages busy Stages (issue 30 §4): the first page in Chromium
// against `status -o json` reading the same Stages, a pause's way from the
// API server to the page against a plain watch seeing it, and the
// dashboard's memory.
func (b *bench) dashboard(ctx context.Context) ([]row, error) {
	n := *dashStages
	if n < 1 || *dashPages < 1 || *dashChanges < 1 {
		return nil, errors.New("-dashboard-stages, -dashboard-pages and -dashboard-changes must be at least 1")
	}
	if _, err := b.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: dashNS,
		Labels: map[string]string{"kargo.akuity.io/project": "true"}}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	say("dashboard: creating %d busy Stages in %s (status as Kargo keeps it, a latch record each), a pipeline of %d columns", n, dashNS, dashColumns)
	t0 := time.Now()
	stages, err := b.createDashboardStages(ctx, n)
	if err != nil {
		return nil, err
	}
	say("dashboard: created in %v", time.Since(t0).Round(time.Second))

	d, err := b.startDashboard(ctx)
	if err != nil {
		return nil, err
	}
	defer d.stop()
	started := procMemory(d.pid())
	say("dashboard: serving %s %v after its start (its watches listed); RSS %s", d.url, d.ready.Round(time.Millisecond), mb(started.rss))

	br, err := newDashBrowser(ctx, d.url, n)
	if err != nil {
		return nil, err
	}
	defer br.close()

	load0 := loadAvg()
	say("dashboard: first page in Chromium, %d new tabs, each after a run of `status -n %s -o json` (the baseline); load %s", *dashPages, dashNS, load0)
	var pages, statuses []time.Duration
	var statusRSS int64
	var first []firstPage
	for i := range *dashPages {
		st, err := b.statusOnce(ctx, n)
		if err != nil {
			return nil, err
		}
		statuses, statusRSS = append(statuses, st.took), max(statusRSS, st.maxRSS)
		p, err := br.firstPage(i == *dashPages-1)
		if err != nil {
			return nil, err
		}
		first, pages = append(first, p), append(pages, p.painted)
		say("   tab %d: all %d cards painted %v after the navigation's start (full message %.1f MB in at %v, cards in the DOM %v); status -o json %v, %.1f MB",
			i+1, n, ms(p.painted), float64(p.bytes)/(1<<20), ms(p.message), ms(p.dom), st.took.Round(time.Millisecond), float64(st.bytes)/(1<<20))
	}
	sayFirstPageSplit(first)
	afterPages := procMemory(d.pid())
	say("dashboard: after the first pages, RSS %s, HWM %s", mb(afterPages.rss), mb(afterPages.hwm))

	load1 := loadAvg()
	say("dashboard: %d StagePauses, each on a random Stage, timed from the create's answer to the card painted paused; baseline: a plain watch of stagepauses; load %s", *dashChanges, load1)
	cpu0 := procCPU(d.pid())
	ch, err := b.dashboardChanges(ctx, br, stages)
	if err != nil {
		return nil, err
	}
	cpu := procCPU(d.pid()) - cpu0
	afterChanges := procMemory(d.pid())
	load2 := loadAvg()
	say("dashboard: after the changes, RSS %s, HWM %s; it used %v of CPU during them (%v per change); load %s",
		mb(afterChanges.rss), mb(afterChanges.hwm), cpu, cpu/time.Duration(len(ch.page)), load2)
	if err := br.screenshot(ctx, fmt.Sprintf("dashboard-%d-stages", n)); err != nil {
		say("dashboard: screenshot: %v", err)
	} else {
		say("dashboard: screenshot dist/screenshots/dashboard-%d-stages.png", n)
	}
	if errs := br.console.Errors(); len(errs) > 0 {
		say("dashboard: the page raised %d error(s): %s", len(errs), strings.Join(errs, "; "))
	}

	pp, sp := percentiles(pages), percentiles(statuses)
	cp, wp := percentiles(ch.page), percentiles(ch.watch)
	of := fmt.Sprintf("%d Stages", n)
	return []row{
		{figure: "D1. dashboard first page, " + of + " (navigation → every card painted)",
			value:    fmt.Sprintf("p50 %v, max %v (%d tabs; load %s)", ms(pp.p50), ms(pp.max), pp.n, load0),
			baseline: fmt.Sprintf("status -o json of the same Stages: p50 %v, max %v", ms(sp.p50), ms(sp.max)),
			ratio:    fmt.Sprintf("p50 %.2f×", float64(pp.p50)/float64(sp.p50)),
			goal:     "every tab < 1 s", met: pp.max < time.Second},
		{figure: "D2. dashboard change, " + of + " (StagePause created → card painted paused)",
			value:    fmt.Sprintf("%s (load %s)", cp.withP95(), load2),
			baseline: "plain watch of stagepauses " + wp.withP95(),
			ratio:    fmt.Sprintf("p95 %.0f×", float64(cp.p95)/float64(max(wp.p95, time.Millisecond))),
			goal:     "p95 < 1 s", met: cp.p95 < time.Second},
		{figure: "D3. dashboard memory, " + of,
			value: fmt.Sprintf("after the first pages RSS %s (HWM %s); after the changes RSS %s (HWM %s)",
				mb(afterPages.rss), mb(afterPages.hwm), mb(afterChanges.rss), mb(afterChanges.hwm)),
			baseline: "status -o json peak RSS " + mb(statusRSS),
			ratio:    fmt.Sprintf("HWM %.2f×", float64(afterChanges.hwm)/float64(statusRSS)),
			goal:     "reported only", met: true},
	}, nil
}

// createDashboardStages creates the project's busy Stages, 16 at a time:
// Kargo's status as WriteBusyStatus leaves it, the record the operator
// would keep for a Stage latched on its own Healthy, and spec.requestedFreight
// from the Stage one column up (the first column from the Warehouse).
func (b *bench) createDashboardStages(ctx context.Context, n int) ([]*driver.Stage, error) {
	perColumn := (n + dashColumns - 1) / dashColumns
	return createEach(n, func(i int) (*driver.Stage, error) {
		opts := []driver.StageOption{driver.WithBusyApps()}
		if i >= perColumn {
			opts = append(opts, fromStage(fmt.Sprintf("stage-%05d", i-perColumn)))
		}
		s, err := b.kargo.CreateStage(ctx, dashNS, fmt.Sprintf("stage-%05d", i), map[string]string{api.PauseOnFailureAnnotation: "true"}, opts...)
		if err == nil {
			err = s.WriteBusyStatus(ctx, kargo.HealthHealthy)
		}
		if err == nil {
			err = b.writeLatchedRecord(ctx, s)
		}
		return s, err
	})
}

// fromStage makes the Stage request its Freight from upstream, not from the
// Warehouse: an edge of the pipeline the page lays out.
func fromStage(upstream string) driver.StageOption {
	return func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedSlice(u.Object, []any{map[string]any{
			"origin":  map[string]any{"kind": "Warehouse", "name": "warehouse"},
			"sources": map[string]any{"stages": []any{upstream}},
		}}, "spec", "requestedFreight")
	}
}

// writeLatchedRecord stores the record the operator keeps for a busy Stage
// latched on the Stage's own Healthy (LatchedByStage: no per-App times),
// for the cycle of its status: what `status` and the page read.
func (b *bench) writeLatchedRecord(ctx context.Context, s *driver.Stage) error {
	u, err := s.Get(ctx)
	if err != nil {
		return err
	}
	promotion, _, _ := unstructured.NestedString(u.Object, "status", "lastPromotion", "name")
	freight, _, _ := unstructured.NestedString(u.Object, "status", "lastPromotion", "freight", "name")
	finished, _, _ := unstructured.NestedString(u.Object, "status", "lastPromotion", "finishedAt")
	history, _, _ := unstructured.NestedSlice(u.Object, "status", "freightHistory")
	if len(history) == 0 || promotion == "" {
		return fmt.Errorf("stage %s/%s: no busy status to latch", s.Namespace, s.Name)
	}
	id, _ := history[0].(map[string]any)["id"].(string)
	promoted, err := time.Parse(time.RFC3339, finished)
	if err != nil {
		return err
	}
	latched := promoted.Add(45 * time.Second)
	v := latch.VerificationRecord{ID: fmt.Sprintf("%s-%d", id[:12], promoted.Unix()), Actor: latch.Actor, StartTime: promoted, FinishTime: latched,
		Phase: latch.VerificationSuccessful, Message: "Stage Healthy: latched"}
	rec := latch.Record{Promotion: promotion, Freight: freight, FreightID: id, Phase: latch.PhaseLatched, PromotedAt: &promoted,
		LatchedAt: &latched, LatchedBy: latch.LatchedByStage, Marked: []string{freight}, ExaminedPromotion: promotion,
		Verification: &v, History: []latch.VerificationRecord{v}}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{api.StateAnnotation: rec.Encode()}}})
	if err != nil {
		return err
	}
	_, err = b.dyn.Resource(kargo.StagesResource).Namespace(s.Namespace).Patch(ctx, s.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// dashProc is the `kargo-latch dashboard` process measured.
type dashProc struct {
	cmd   *exec.Cmd
	url   string
	ready time.Duration // from its start to its first line
	done  chan struct{}
}

func (d *dashProc) pid() int { return d.cmd.Process.Pid }

// startDashboard runs bin/kargo-latch dashboard as the cluster's admin over
// the project, on a free port, and reads its address from its first line.
// Its log is dashboard.log in the cluster's directory.
func (b *bench) startDashboard(ctx context.Context) (*dashProc, error) {
	log, err := os.Create(filepath.Join(b.c.Dir, "dashboard.log"))
	if err != nil {
		return nil, err
	}
	d := &dashProc{done: make(chan struct{})}
	d.cmd = exec.Command(b.dashCLI(), "dashboard", "--kubeconfig", b.kubecfgAdmin(), "-n", dashNS, "--port", "0")
	d.cmd.Stderr = log
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := d.cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	t0 := time.Now()
	if err := d.cmd.Start(); err != nil {
		_ = log.Close()
		return nil, fmt.Errorf("starting bin/kargo-latch dashboard (make build): %w", err)
	}
	lines := make(chan string, 1)
	go func() {
		r := bufio.NewReader(out)
		line, _ := r.ReadString('\n')
		lines <- line
		_, _ = io.Copy(log, r)
	}()
	go func() { _ = d.cmd.Wait(); _ = log.Close(); close(d.done) }()
	select {
	case line := <-lines:
		d.ready = time.Since(t0)
		if d.url = clidashboard.AddressIn(line); d.url == "" {
			d.stop()
			return nil, fmt.Errorf("the dashboard said %q, not its address (its log: %s)", line, filepath.Join(b.c.Dir, "dashboard.log"))
		}
		return d, nil
	case <-time.After(5 * time.Minute):
	case <-ctx.Done():
	}
	d.stop()
	return nil, errors.New("the dashboard did not say its address within 5 minutes")
}

// stop ends the dashboard as Ctrl-C does.
func (d *dashProc) stop() {
	_ = d.cmd.Process.Signal(os.Interrupt)
	select {
	case <-d.done:
	case <-time.After(5 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

// statusRun is one run of `kargo-latch status -o json`.
type statusRun struct {
	took          time.Duration
	maxRSS, bytes int64
}

// statusOnce runs `status -n dashNS -o json` as the admin and checks it
// shows the n Stages: the same reading as the page's, without a page.
func (b *bench) statusOnce(ctx context.Context, n int) (statusRun, error) {
	cmd := exec.CommandContext(ctx, b.dashCLI(), "status", "--kubeconfig", b.kubecfgAdmin(), "-n", dashNS, "-o", "json")
	var out, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &stderr
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		return statusRun{}, fmt.Errorf("kargo-latch status: %w: %s", err, stderr.String())
	}
	r := statusRun{took: time.Since(t0), bytes: int64(out.Len())}
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
		r.maxRSS = ru.Maxrss << 10
	}
	var rows []struct{}
	if err := json.Unmarshal([]byte(out.String()), &rows); err != nil {
		return r, fmt.Errorf("kargo-latch status -o json: %w", err)
	}
	if len(rows) != n {
		return r, fmt.Errorf("kargo-latch status showed %d Stages, not %d", len(rows), n)
	}
	return r, nil
}

// procMem is a process's resident memory now and at its peak.
type procMem struct{ rss, hwm int64 }

// procMemory reads VmRSS and VmHWM from /proc/<pid>/status.
func procMemory(pid int) procMem {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	var m procMem
	for line := range strings.SplitSeq(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 1 && (f[0] == "VmRSS:" || f[0] == "VmHWM:") {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			if f[0] == "VmRSS:" {
				m.rss = kb << 10
			} else {
				m.hwm = kb << 10
			}
		}
	}
	return m
}

// procCPU is the CPU time a process used so far (user and system), from
// /proc/<pid>/stat in clock ticks of 10 ms.
func procCPU(pid int) time.Duration {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	if len(f) < 13 {
		return 0
	}
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// loadAvg is the machine's load average over 1, 5 and 15 minutes.
func loadAvg() string {
	data, _ := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(data)); len(f) >= 3 {
		return strings.Join(f[:3], "/")
	}
	return "unknown"
}
