package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/controller"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/cluster"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

const (
	busyNS = "bench"
	wideNS = "bench-wide"
)

type bench struct {
	o        options
	c        *cluster.Cluster
	dyn      dynamic.Interface
	kargo    *driver.Kargo
	watcher  *watcher
	busy     []*driver.Stage
	wide     []*driver.Stage
	operator *exec.Cmd
	opDone   chan struct{}
	kubecfg  string
	probeURL string
}

func newBench(ctx context.Context, c *cluster.Cluster, o options) (*bench, error) {
	b := &bench{o: o, c: c, dyn: dynamic.NewForConfigOrDie(c.Config)}
	b.kargo = driver.New(b.dyn)
	objs, err := cluster.Kustomize(filepath.Join(c.Root, "manifests", "default"))
	if err != nil {
		return nil, err
	}
	if err := cluster.Apply(ctx, c.Config, objs...); err != nil {
		return nil, err
	}
	kube := kubernetes.NewForConfigOrDie(c.Config)
	for _, ns := range []string{busyNS, wideNS} {
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			return nil, err
		}
	}
	sa, err := c.ServiceAccountConfig(ctx, "kargo-latch", "kargo-latch")
	if err != nil {
		return nil, err
	}
	b.kubecfg = filepath.Join(c.Dir, "kubeconfig-operator")
	if err := cluster.WriteKubeconfig(b.kubecfg, sa, ""); err != nil {
		return nil, err
	}
	b.watcher = newWatcher(b.dyn)
	for _, ns := range []string{busyNS, wideNS} {
		go b.watcher.run(ctx, ns)
	}
	return b, nil
}

// setUp creates the Stages and lets the operator latch them all.
func (b *bench) setUp(ctx context.Context) ([]row, error) {
	say("creating %d busy Stages (~64 KB of status each) and %d small ones", b.o.stages, b.o.wide)
	var err error
	if b.busy, err = b.createStages(ctx, busyNS, b.o.stages, true); err != nil {
		return nil, err
	}
	if b.wide, err = b.createStages(ctx, wideNS, b.o.wide, false); err != nil {
		return nil, err
	}
	if err := b.startOperator(); err != nil {
		return nil, err
	}
	say("waiting for the operator to latch every Stage")
	if err := b.watcher.waitFor(ctx, 5*time.Minute, func(w *watcher) bool {
		return w.latched[busyNS] == b.o.stages && w.latched[wideNS] == b.o.wide
	}); err != nil {
		return nil, err
	}
	return nil, nil
}

func (b *bench) createStages(ctx context.Context, ns string, n int, busy bool) ([]*driver.Stage, error) {
	stages := make([]*driver.Stage, n)
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			s, err := b.kargo.CreateStage(ctx, ns, fmt.Sprintf("stage-%05d", i), map[string]string{controller.PauseOnFailureAnnotation: "true"})
			if err == nil {
				if busy {
					err = s.WriteBusyStatus(ctx, kargo.HealthHealthy)
				} else {
					_, err = s.FinishPromotion(ctx, "Succeeded")
					if err == nil {
						err = s.SetHealth(ctx, kargo.HealthHealthy)
					}
				}
			}
			stages[i] = s
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return stages, nil
}

func (b *bench) startOperator() error {
	ports, err := cluster.FreePorts(1)
	if err != nil {
		return err
	}
	b.probeURL = "http://127.0.0.1:" + strconv.Itoa(ports[0]) + "/readyz"
	log, err := os.OpenFile(filepath.Join(b.c.Dir, "operator.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	b.operator = exec.Command(binPath(b.c, "kargo-latch"), "--kubeconfig", b.kubecfg,
		"--namespace", busyNS, "--namespace", wideNS, "--metrics-bind-address", "0",
		"--health-probe-bind-address", "127.0.0.1:"+strconv.Itoa(ports[0]))
	b.operator.Stdout, b.operator.Stderr = log, log
	// As manifests/base/deployment.yaml runs it.
	b.operator.Env = append(os.Environ(), "GOGC=50")
	b.operator.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := b.operator.Start(); err != nil {
		return fmt.Errorf("starting bin/kargo-latch (make build): %w", err)
	}
	done := make(chan struct{})
	b.opDone = done
	go func(cmd *exec.Cmd) { _ = cmd.Wait(); close(done) }(b.operator)
	return nil
}

func (b *bench) stopOperator() {
	if b.operator != nil && b.operator.Process != nil {
		_ = b.operator.Process.Kill()
		<-b.opDone
	}
}

func (b *bench) ready() bool {
	resp, err := http.Get(b.probeURL) //nolint:noctx // loopback probe
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// churn writes status changes Kargo-style at the given rate until ctx is
// done: health flaps on Stages other than the first spare ones. At most 16
// writes are in flight; a tick that finds them all busy is skipped, so an
// overloaded apiserver is not buried. It returns the writes made.
func (b *bench) churn(ctx context.Context, perSecond int, spare int, done *atomic.Int64) {
	tick := time.NewTicker(time.Second / time.Duration(perSecond))
	defer tick.Stop()
	inFlight := make(chan struct{}, 16)
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		select {
		case inFlight <- struct{}{}:
		default:
			continue
		}
		s := b.busy[spare+rand.IntN(len(b.busy)-spare)] //nolint:gosec // load pattern, not security
		h := kargo.HealthProgressing
		if i%2 == 1 {
			h = kargo.HealthHealthy
		}
		go func() {
			defer func() { <-inFlight }()
			if s.SetHealth(ctx, h) == nil {
				done.Add(1)
			}
		}()
	}
}

// reaction times, under churn, the raw PATCH→watch round trip and the
// operator's reaction to failures, and counts its writes in a steady state.
func (b *bench) reaction(ctx context.Context) ([]row, error) {
	churnCtx, stopChurn := context.WithCancel(ctx)
	defer stopChurn()
	spare := min(b.o.samples, len(b.busy)/2)
	var churned atomic.Int64
	churnStart := time.Now()
	go b.churn(churnCtx, b.o.churn, spare, &churned)
	time.Sleep(2 * time.Second)

	say("baseline: PATCH one busy Stage, observe it through a watch (%d samples)", 2*b.o.samples)
	var base []time.Duration
	for i := range 2 * b.o.samples {
		s := b.busy[spare+i%(len(b.busy)-spare)]
		value := strconv.Itoa(i)
		t0 := time.Now()
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"bench/ping":%q}}}`, value)
		if _, err := b.dyn.Resource(kargo.StagesResource).Namespace(busyNS).Patch(ctx, s.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return nil, err
		}
		seen, err := b.watcher.waitPing(ctx, s.Name, value)
		if err != nil {
			return nil, err
		}
		base = append(base, seen.Sub(t0))
	}

	say("reaction: a promotion fails; time until a watcher sees the paused label (%d samples)", spare)
	var react []time.Duration
	for i := range spare {
		s := b.busy[i]
		t0 := time.Now()
		if _, err := s.FinishPromotion(ctx, "Failed"); err != nil {
			return nil, err
		}
		seen, err := b.watcher.waitPaused(ctx, busyNS, s.Name)
		if err != nil {
			return nil, err
		}
		react = append(react, seen.Sub(t0))
		time.Sleep(50 * time.Millisecond)
	}

	say("steady state: counting the operator's writes during %v of churn", b.o.steadyFor)
	before := b.watcher.operatorWrites()
	time.Sleep(b.o.steadyFor)
	writes := b.watcher.operatorWrites() - before
	perStageHour := float64(writes) / float64(len(b.busy)) / b.o.steadyFor.Hours()
	rate := float64(churned.Load()) / time.Since(churnStart).Seconds()

	bp, rp := percentiles(base), percentiles(react)
	return []row{
		{figure: "1. reaction latency (failure → paused label seen)", value: rp.String(), baseline: "PATCH→watch " + bp.String(),
			goal: "p99 ≤ 2.5× baseline p99", met: rp.p99 <= bp.p99*5/2, ratio: fmt.Sprintf("p99 %.2f×", float64(rp.p99)/float64(bp.p99))},
		{figure: "5. steady-state writes", value: fmt.Sprintf("%d writes in %v (%.3f per Stage per hour)", writes, b.o.steadyFor, perStageHour),
			baseline: fmt.Sprintf("%.0f status writes/s of churn achieved", rate), goal: "0", met: writes == 0},
	}, nil
}

// projectWide times one project-wide pause over the small Stages.
func (b *bench) projectWide(ctx context.Context) ([]row, error) {
	say("project-wide pause of %d Stages", len(b.wide))
	p := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "StagePause",
		"metadata": map[string]any{"name": "big-red-button", "namespace": wideNS},
		"spec":     map[string]any{"stage": "*", "reason": "ProjectPause"},
	}}
	t0 := time.Now()
	if _, err := b.dyn.Resource(v1alpha1.StagePausesResource).Namespace(wideNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if err := b.watcher.waitFor(ctx, time.Minute, func(w *watcher) bool { return w.paused[wideNS] == len(b.wide) }); err != nil {
		return nil, err
	}
	took := time.Since(t0)
	return []row{{figure: fmt.Sprintf("2. project-wide pause, %d Stages all labeled", len(b.wide)), value: took.Round(time.Millisecond).String(),
		baseline: "-", goal: "< 2s", met: took < 2*time.Second}}, nil
}

// memoryAndColdStart measures the operator's memory after sync and a cold
// restart against a plain, untransformed dynamic informer over the same
// Stages, in the same run.
func (b *bench) memoryAndColdStart(ctx context.Context) ([]row, error) {
	say("memory: operator RSS after sync")
	opRSS, err := rss(b.operator.Process.Pid)
	if err != nil {
		return nil, err
	}
	say("baseline: a plain dynamic informer over the same Stages")
	out, err := exec.CommandContext(ctx, os.Args[0], "plain-informer", b.kubecfgAdmin(), busyNS, wideNS).Output() //nolint:gosec // this very binary
	if err != nil {
		return nil, fmt.Errorf("plain informer: %w", err)
	}
	var plainRSS int64
	var plainSync time.Duration
	if _, err := fmt.Sscanf(strings.TrimSpace(string(out)), "%d %d", &plainRSS, &plainSync); err != nil {
		return nil, fmt.Errorf("plain informer said %q: %w", out, err)
	}

	say("cold start: restarting the operator over %d Stages", len(b.busy)+len(b.wide))
	b.stopOperator()
	before := b.watcher.operatorWrites()
	t0 := time.Now()
	if err := b.startOperator(); err != nil {
		return nil, err
	}
	for !b.ready() {
		if time.Since(t0) > 5*time.Minute {
			return nil, fmt.Errorf("the operator did not become ready")
		}
		time.Sleep(10 * time.Millisecond)
	}
	synced := time.Since(t0)
	time.Sleep(10 * time.Second)
	writes := b.watcher.operatorWrites() - before
	stages := len(b.busy) + len(b.wide)
	return []row{
		{figure: fmt.Sprintf("3. operator RSS after sync, %d Stages", stages), value: mb(opRSS), baseline: "plain informer " + mb(plainRSS),
			goal: "≤ 150 MB at 10k and ≤ 0.1× baseline", met: float64(opRSS) <= 0.1*float64(plainRSS) && (stages < 10000 || opRSS <= 150<<20),
			ratio: fmt.Sprintf("%.3f×", float64(opRSS)/float64(plainRSS))},
		{figure: fmt.Sprintf("4. cold start to caches synced, %d Stages", stages), value: fmt.Sprintf("%v, %d writes in the next 10s", synced.Round(time.Millisecond), writes),
			baseline: "plain informer " + plainSync.Round(time.Millisecond).String(), goal: "≤ 1.2× baseline, 0 writes",
			met: float64(synced) <= 1.2*float64(plainSync) && writes == 0, ratio: fmt.Sprintf("%.2f×", float64(synced)/float64(plainSync))},
	}, nil
}

func (b *bench) kubecfgAdmin() string {
	path := filepath.Join(b.c.Dir, "kubeconfig-admin")
	_ = cluster.WriteKubeconfig(path, b.c.Config, "")
	return path
}

func rss(pid int) (int64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmRSS:") {
			f := strings.Fields(line)
			kb, err := strconv.ParseInt(f[1], 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

func mb(b int64) string { return fmt.Sprintf("%.0f MB", float64(b)/(1<<20)) }

// watcher is the separate observer of the tests: one watch per namespace.
type watcher struct {
	dyn  dynamic.Interface
	mu   sync.Mutex
	cond *sync.Cond
	// state per Stage key
	state   map[string]string // last kargo-latch.io/state
	label   map[string]bool   // paused label
	ping    map[string]string // bench/ping annotation
	pingAt  map[string]time.Time
	pauseAt map[string]time.Time
	latched map[string]int // by namespace
	paused  map[string]int // by namespace
	writes  int
	phase   map[string]latch.Phase
}

func newWatcher(dyn dynamic.Interface) *watcher {
	w := &watcher{dyn: dyn, state: map[string]string{}, label: map[string]bool{}, ping: map[string]string{},
		pingAt: map[string]time.Time{}, pauseAt: map[string]time.Time{}, latched: map[string]int{}, paused: map[string]int{},
		phase: map[string]latch.Phase{}}
	w.cond = sync.NewCond(&w.mu)
	return w
}

func (w *watcher) run(ctx context.Context, ns string) {
	rv := ""
	for ctx.Err() == nil {
		wi, err := w.dyn.Resource(kargo.StagesResource).Namespace(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			time.Sleep(100 * time.Millisecond)
			continue
		}
		for ev := range wi.ResultChan() {
			u, ok := ev.Object.(*unstructured.Unstructured)
			if !ok {
				continue
			}
			rv = u.GetResourceVersion()
			if ev.Type == watch.Added || ev.Type == watch.Modified {
				w.observe(ns, u, time.Now())
			}
		}
	}
}

func (w *watcher) observe(ns string, u *unstructured.Unstructured, at time.Time) {
	key := ns + "/" + u.GetName()
	st := u.GetAnnotations()[controller.StateAnnotation]
	lbl := u.GetLabels()[controller.PausedLabel] == "true"
	ping := u.GetAnnotations()["bench/ping"]
	w.mu.Lock()
	defer w.mu.Unlock()
	if prev, ok := w.state[key]; ok && (prev != st || w.label[key] != lbl) {
		w.writes++
	}
	if lbl && !w.label[key] {
		w.paused[ns]++
		w.pauseAt[key] = at
	} else if !lbl && w.label[key] {
		w.paused[ns]--
	}
	if ping != w.ping[key] {
		w.pingAt[key+"="+ping] = at
	}
	r, _ := latch.Decode(st)
	if r.Phase != w.phase[key] {
		if w.phase[key] == latch.PhaseLatched {
			w.latched[ns]--
		}
		if r.Phase == latch.PhaseLatched {
			w.latched[ns]++
		}
		w.phase[key] = r.Phase
	}
	w.state[key], w.label[key], w.ping[key] = st, lbl, ping
	w.cond.Broadcast()
}

func (w *watcher) waitFor(ctx context.Context, limit time.Duration, cond func(*watcher) bool) error {
	deadline := time.Now().Add(limit)
	stop := context.AfterFunc(ctx, func() { w.mu.Lock(); w.cond.Broadcast(); w.mu.Unlock() })
	defer stop()
	timer := time.AfterFunc(limit, func() { w.mu.Lock(); w.cond.Broadcast(); w.mu.Unlock() })
	defer timer.Stop()
	w.mu.Lock()
	defer w.mu.Unlock()
	for !cond(w) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("timed out after %v", limit)
		}
		w.cond.Wait()
	}
	return nil
}

func (w *watcher) waitPing(ctx context.Context, name, value string) (time.Time, error) {
	var at time.Time
	err := w.waitFor(ctx, time.Minute, func(w *watcher) bool {
		t, ok := w.pingAt[busyNS+"/"+name+"="+value]
		at = t
		return ok
	})
	return at, err
}

func (w *watcher) waitPaused(ctx context.Context, ns, name string) (time.Time, error) {
	var at time.Time
	err := w.waitFor(ctx, time.Minute, func(w *watcher) bool {
		t, ok := w.pauseAt[ns+"/"+name]
		at = t
		return ok && w.label[ns+"/"+name]
	})
	return at, err
}

func (w *watcher) operatorWrites() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writes
}
