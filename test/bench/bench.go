package main

import (
	"context"
	"fmt"
	"io"
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
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/controller"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/test/cluster"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

const (
	busyNS = "bench"
	wideNS = "bench-wide"
)

type bench struct {
	o          options
	c          *cluster.Cluster
	dyn        dynamic.Interface
	kube       kubernetes.Interface
	kargo      *driver.Kargo
	watcher    *watcher
	busy       []*driver.Stage
	wide       []*driver.Stage
	operator   *exec.Cmd
	opDone     chan struct{}
	kubecfg    string
	probeURL   string
	metricsURL string
}

func newBench(ctx context.Context, c *cluster.Cluster, o options) (*bench, error) {
	b := &bench{o: o, c: c, dyn: dynamic.NewForConfigOrDie(c.Config)}
	b.kargo = driver.New(b.dyn)
	objs, err := installManifests(c)
	if err != nil {
		return nil, err
	}
	if err := cluster.Apply(ctx, c.Config, objs...); err != nil {
		return nil, err
	}
	kube := kubernetes.NewForConfigOrDie(c.Config)
	b.kube = kube
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

// installManifests builds manifests/default with the opt-in mark-verified
// component, as an installation that turns mark-verified on would.
func installManifests(c *cluster.Cluster) ([]*unstructured.Unstructured, error) {
	overlay := filepath.Join(c.Dir, "bench-install")
	if err := os.MkdirAll(overlay, 0o700); err != nil {
		return nil, err
	}
	var rel [2]string
	for i, dir := range []string{"default", filepath.Join("components", "mark-verified")} {
		r, err := filepath.Rel(overlay, filepath.Join(c.Root, "manifests", dir))
		if err != nil {
			return nil, err
		}
		rel[i] = r
	}
	k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [%q]\ncomponents: [%q]\n", rel[0], rel[1])
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(k), 0o600); err != nil {
		return nil, err
	}
	return cluster.Kustomize(overlay)
}

// setUp creates the Stages and lets the operator latch them all.
func (b *bench) setUp(ctx context.Context) ([]row, error) {
	say("creating %d busy Stages (status as Kargo keeps it, %d Apps each) and %d small ones", b.o.stages, driver.BusyApps, b.o.wide)
	var err error
	if b.busy, err = b.createStages(ctx, busyNS, b.o.stages, true); err != nil {
		return nil, err
	}
	if b.wide, err = b.createStages(ctx, wideNS, b.o.wide, false); err != nil {
		return nil, err
	}
	if one, err := b.busy[0].Get(ctx); err == nil {
		if body, err := one.MarshalJSON(); err == nil {
			say("one busy Stage is %.1f KB of JSON", float64(len(body))/1024)
		}
	}
	if err := b.startOperator(); err != nil {
		return nil, err
	}
	// The operator stores a first record on every Stage, at its QPS, on a
	// machine the apiserver already saturates: allow for the scale.
	limit := 5*time.Minute + time.Duration(b.o.stages+b.o.wide)*200*time.Millisecond
	say("waiting for the operator to latch every Stage (at most %v)", limit)
	lastSaid := time.Now()
	if err := b.watcher.waitFor(ctx, limit, func(w *watcher) bool {
		if time.Since(lastSaid) > 30*time.Second {
			lastSaid = time.Now()
			say("   ... %d of %d Stages latched", w.latched[busyNS]+w.latched[wideNS], b.o.stages+b.o.wide)
		}
		return w.latched[busyNS] == b.o.stages && w.latched[wideNS] == b.o.wide
	}); err != nil {
		return nil, err
	}
	b.watcher.mu.Lock()
	record := b.watcher.state[busyNS+"/"+b.busy[0].Name]
	b.watcher.mu.Unlock()
	say("one busy Stage's record (%s) is %d bytes", controller.StateAnnotation, len(record))
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
	ports, err := cluster.FreePorts(2)
	if err != nil {
		return err
	}
	b.probeURL = "http://127.0.0.1:" + strconv.Itoa(ports[0]) + "/readyz"
	b.metricsURL = "http://127.0.0.1:" + strconv.Itoa(ports[1]) + "/metrics"
	log, err := os.OpenFile(filepath.Join(b.c.Dir, "operator.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	b.operator = exec.Command(binPath(b.c, "kargo-latch"), "--kubeconfig", b.kubecfg,
		"--namespace", busyNS, "--namespace", wideNS, "--metrics-bind-address", "127.0.0.1:"+strconv.Itoa(ports[1]), "--mark-verified", "--profiling",
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

// saveHeapProfile keeps the operator's heap profile in the temporary
// directory (the cluster's own goes with it), for `go tool pprof` when the
// memory figure needs explaining. A failure only costs the profile.
func (b *bench) saveHeapProfile(ctx context.Context) {
	url := strings.TrimSuffix(b.metricsURL, "/metrics") + "/debug/pprof/heap"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		say("heap profile: %v", err)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	path := filepath.Join(os.TempDir(), "kargo-latch-bench-heap.pprof")
	f, err := os.Create(path)
	if err != nil {
		return
	}
	defer func() { _ = f.Close() }()
	if _, err := io.Copy(f, resp.Body); err == nil {
		say("heap profile: go tool pprof -sample_index=inuse_space %s", path)
	}
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
// done: health flaps of the busy Stages from the reserved-th on. A flap to
// Progressing makes one App Progressing, a flap back makes all Healthy, and
// each writes the whole 40-App output, as Kargo does. At most
// -churn-in-flight writes are in flight; a tick that finds them all busy is
// skipped, so an overloaded apiserver is not buried. More writes in flight
// do not raise the rate a saturated apiserver sustains; they only queue in
// it, and starve the one goroutine that feeds its watch cache, so that every
// watch, the operator's included, falls seconds behind and the apiserver
// ends up closing them. done counts the writes made.
func (b *bench) churn(ctx context.Context, perSecond int, reserved int, done *atomic.Int64) {
	tick := time.NewTicker(time.Second / time.Duration(perSecond))
	defer tick.Stop()
	inFlight := make(chan struct{}, b.o.inFlight)
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
		s := b.busy[reserved+rand.IntN(len(b.busy)-reserved)] //nolint:gosec // load pattern, not security
		flapping := rand.IntN(driver.BusyApps)                //nolint:gosec // load pattern, not security
		aggregate, apps := kargo.HealthProgressing, appsHealthyBut(flapping)
		if i%2 == 1 {
			aggregate, apps = kargo.HealthHealthy, appsHealthyBut(-1)
		}
		go func() {
			defer func() { <-inFlight }()
			if s.SetBusyHealth(ctx, aggregate, apps) == nil {
				done.Add(1)
			}
		}()
	}
}

// reaction times, under churn, the raw PATCH→watch round trip, the
// operator's reaction to failures and its latch → verifiedIn path, and then
// counts its writes in a steady state. The failures and the marked cycles
// take their own busy Stages, which the churn leaves alone.
func (b *bench) reaction(ctx context.Context) ([]row, error) {
	churnCtx, stopChurn := context.WithCancel(ctx)
	defer stopChurn()
	spare := min(b.o.samples, len(b.busy)/4)
	failing, marking := b.busy[:spare], b.busy[spare:2*spare]
	reserved := 2 * spare
	var churned atomic.Int64
	churnStart := time.Now()
	go b.churn(churnCtx, b.o.churn, reserved, &churned)
	time.Sleep(2 * time.Second)

	say("baseline: PATCH one busy Stage, observe it through a watch (%d samples)", 2*b.o.samples)
	var base, request, hop []time.Duration
	server := b.viewServer(ctx)
	for i := range 2 * b.o.samples {
		s := b.busy[reserved+i%(len(b.busy)-reserved)]
		value := strconv.Itoa(i)
		t0 := time.Now()
		patch := fmt.Sprintf(`{"metadata":{"annotations":{"bench/ping":%q}}}`, value)
		if _, err := b.dyn.Resource(kargo.StagesResource).Namespace(busyNS).Patch(ctx, s.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return nil, err
		}
		returned := time.Now()
		seen, err := b.watcher.waitPing(ctx, busyNS, s.Name, value)
		if err != nil {
			return nil, err
		}
		base, request, hop = append(base, seen.Sub(t0)), append(request, returned.Sub(t0)), append(hop, seen.Sub(returned))
	}
	say("baseline, split: the PATCH returned %v; → the watcher saw it %v", percentiles(request), percentiles(hop))
	b.sayServerSide(ctx, "baseline", server, "PATCH stages", "PATCH stages/status")

	say("reaction: a promotion fails; time until a watcher sees the paused label (%d samples)", len(failing))
	var react []time.Duration
	server, operator := b.viewServer(ctx), b.viewOperator(ctx)
	for _, s := range failing {
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

	b.sayServerSide(ctx, "reaction", server, "GET stages", "POST stagepauses", "POST events", "PATCH stages", "PATCH stages/status")
	b.sayOperatorSide(ctx, "reaction", operator)

	say("mark verified: every App Healthy in the cycle; time until a watcher sees verifiedIn on the Freight (%d samples)", len(marking))
	verified, err := b.verifiedLatency(ctx, marking)
	if err != nil {
		return nil, err
	}

	say("steady state: counting the operator's writes during %v of churn", b.o.steadyFor)
	stagesBefore, marksBefore := b.watcher.operatorWrites()
	time.Sleep(b.o.steadyFor)
	stagesAfter, marksAfter := b.watcher.operatorWrites()
	stageWrites, marks := stagesAfter-stagesBefore, marksAfter-marksBefore
	writes := stageWrites + marks
	perStageHour := float64(writes) / float64(len(b.busy)) / b.o.steadyFor.Hours()
	rate := float64(churned.Load()) / time.Since(churnStart).Seconds()

	bp, rp, vp := percentiles(base), percentiles(react), percentiles(verified)
	return []row{
		{figure: "1. reaction latency (failure → paused label seen)", value: rp.String(), baseline: "PATCH→watch " + bp.String(),
			goal: "p99 ≤ 2.5× baseline p99", met: rp.p99 <= bp.p99*5/2, ratio: fmt.Sprintf("p99 %.2f×", float64(rp.p99)/float64(bp.p99))},
		{figure: "5. steady-state writes", value: fmt.Sprintf("%d writes in %v: %d to Stages, %d Freight marks (%.3f per Stage per hour)", writes, b.o.steadyFor, stageWrites, marks, perStageHour),
			baseline: fmt.Sprintf("%.0f status writes/s of churn achieved", rate), goal: "0", met: writes == 0},
		{figure: "6. latch → verifiedIn visible (per-App latch, mark-verified)", value: vp.String(), baseline: "PATCH→watch " + bp.String(),
			goal: "p99 ≤ 3× baseline p99", met: vp.p99 <= bp.p99*3, ratio: fmt.Sprintf("p99 %.2f×", float64(vp.p99)/float64(bp.p99))},
	}, nil
}

// projectWide times one project-wide pause over the small Stages, against
// the same Stages annotated with plain PATCHes by a client with the
// operator's default workers, QPS and burst, in the same run.
func (b *bench) projectWide(ctx context.Context) ([]row, error) {
	say("baseline: %d workers PATCH an annotation on %d Stages at QPS %d, burst %d, until a watcher sees them all", operatorWorkers, len(b.wide), operatorQPS, operatorBurst)
	plain, err := b.plainPatches(ctx)
	if err != nil {
		return nil, err
	}
	say("baseline: %v", plain.Round(time.Millisecond))
	time.Sleep(2 * time.Second) // the operator's syncs of the annotated Stages pass

	say("project-wide pause of %d Stages", len(b.wide))
	p := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "StagePause",
		"metadata": map[string]any{"name": "big-red-button", "namespace": wideNS},
		"spec":     map[string]any{"stage": "*", "reason": "ProjectPause"},
	}}
	server, operator := b.viewServer(ctx), b.viewOperator(ctx)
	t0 := time.Now()
	if _, err := b.dyn.Resource(v1alpha1.StagePausesResource).Namespace(wideNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if err := b.watcher.waitFor(ctx, time.Minute, func(w *watcher) bool { return w.paused[wideNS] == len(b.wide) }); err != nil {
		return nil, err
	}
	took := time.Since(t0)
	b.watcher.mu.Lock()
	var labeled []time.Duration
	for _, s := range b.wide {
		labeled = append(labeled, b.watcher.pauseAt[wideNS+"/"+s.Name].Sub(t0))
	}
	b.watcher.mu.Unlock()
	say("project-wide pause: Stages seen labeled after %v", percentiles(labeled))
	b.sayServerSide(ctx, "project-wide pause", server, "PATCH stages", "POST events")
	b.sayOperatorSide(ctx, "project-wide pause", operator)
	ratio := float64(took) / float64(plain)
	return []row{{figure: fmt.Sprintf("2. project-wide pause, %d Stages all labeled", len(b.wide)), value: took.Round(time.Millisecond).String(),
		baseline: fmt.Sprintf("%d plain PATCHes, %d workers, QPS %d/burst %d: %v", len(b.wide), operatorWorkers, operatorQPS, operatorBurst, plain.Round(time.Millisecond)),
		goal:     "≤ 1.5× baseline", met: ratio <= 1.5, ratio: fmt.Sprintf("%.2f×", ratio)}}, nil
}

// The operator's defaults (cmd/kargo-latch), which the bench runs it with.
const (
	operatorWorkers = 8
	operatorQPS     = 200
	operatorBurst   = 500
)

// plainPatches annotates every small Stage with plain merge PATCHes, from
// operatorWorkers goroutines sharing one client limited as the operator's
// is, and returns the time until the watcher has seen them all.
func (b *bench) plainPatches(ctx context.Context) (time.Duration, error) {
	cfg := rest.CopyConfig(b.c.Config)
	cfg.QPS, cfg.Burst = operatorQPS, operatorBurst
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return 0, err
	}
	const value = "plain"
	work := make(chan string)
	errs := make(chan error, operatorWorkers)
	t0 := time.Now()
	for range operatorWorkers {
		go func() {
			var first error
			for name := range work {
				patch := fmt.Sprintf(`{"metadata":{"annotations":{"bench/ping":%q}}}`, value)
				if _, err := client.Resource(kargo.StagesResource).Namespace(wideNS).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil && first == nil {
					first = err
				}
			}
			errs <- first
		}()
	}
	for _, s := range b.wide {
		work <- s.Name
	}
	close(work)
	for range operatorWorkers {
		if err := <-errs; err != nil {
			return 0, err
		}
	}
	var last time.Time
	for _, s := range b.wide {
		seen, err := b.watcher.waitPing(ctx, wideNS, s.Name, value)
		if err != nil {
			return 0, err
		}
		if seen.After(last) {
			last = seen
		}
	}
	return last.Sub(t0), nil
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
	b.saveHeapProfile(ctx)
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
	stagesBefore, marksBefore := b.watcher.operatorWrites()
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
	stagesAfter, marksAfter := b.watcher.operatorWrites()
	writes := stagesAfter - stagesBefore + marksAfter - marksBefore
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

// viewOperator is the operator's account of its work so far; nil when it
// cannot be read, which only loses the report.
func (b *bench) viewOperator(ctx context.Context) metricsView {
	v, err := viewOperator(ctx, b.metricsURL)
	if err != nil {
		say("cannot read the operator's metrics: %v", err)
	}
	return v
}

// sayOperatorSide reports the operator's queue waits, sync durations,
// reconcile errors and retries during a phase.
func (b *bench) sayOperatorSide(ctx context.Context, phase string, before metricsView) {
	after := b.viewOperator(ctx)
	if before == nil || after == nil {
		return
	}
	d := after.since(before)
	say("%s, inside the operator (churn included): %s", phase, d.describe("queue wait, stages", "sync, stages",
		"failed syncs", "delayed adds (retries and timed requeues)", "Freight marked"))
}

// viewServer is the apiserver's account of its requests so far; nil when
// it cannot be read, which only loses the report.
func (b *bench) viewServer(ctx context.Context) metricsView {
	v, err := viewAPIServer(ctx, b.kube)
	if err != nil {
		say("cannot read the apiserver's metrics: %v", err)
	}
	return v
}

// sayServerSide reports how long the given kinds of request took inside the
// apiserver during a phase, and how long requests waited in its APF queues,
// so that a slow figure can be split into the server's part and the rest.
func (b *bench) sayServerSide(ctx context.Context, phase string, before metricsView, keys ...string) {
	after := b.viewServer(ctx)
	if before == nil || after == nil {
		return
	}
	d := after.since(before)
	say("%s, inside the apiserver (all clients, churn included): %s", phase, d.describe(keys...))
	say("%s, APF queue waits: %s", phase, d.describe(d.keysWith("APF wait")...))
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
