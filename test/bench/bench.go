package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/test/cluster"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

const (
	busyNS = "bench"
	wideNS = "bench-wide"
)

type bench struct {
	o       options
	c       *cluster.Cluster
	dyn     dynamic.Interface
	kube    kubernetes.Interface
	kargo   *driver.Kargo
	watcher *watcher
	busy    []*driver.Stage
	wide    []*driver.Stage
	// operators are the operator processes: one, or one per shard.
	operators []*operator
	kubecfg   string
	book      promotionBook
	load      load
	// verify is the verify-on-latch figures' set-up (verify.go).
	verify *verifySetup
}

func newBench(ctx context.Context, c *cluster.Cluster, o options) (*bench, error) {
	b := &bench{o: o, c: c, dyn: dynamic.NewForConfigOrDie(c.Config), operators: newOperators(c.Dir, o.shards),
		book: promotionBook{names: map[*driver.Stage][]string{}, running: map[*driver.Stage]bool{}}}
	b.kargo = driver.New(b.dyn)
	// verify-on-latch needs Argo Rollouts' CRDs (figures V1 and V2).
	if err := c.InstallRolloutsCRDs(ctx); err != nil {
		return nil, err
	}
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
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{"kargo.akuity.io/project": "true"}}}, metav1.CreateOptions{}); err != nil {
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
	if b.verify, err = b.prepareVerify(ctx); err != nil {
		return nil, err
	}
	return b, nil
}

// installManifests builds manifests/default with the opt-in mark-verified
// and verify-on-latch components, as an installation that turns them on
// would.
func installManifests(c *cluster.Cluster) ([]*unstructured.Unstructured, error) {
	overlay := filepath.Join(c.Dir, "bench-install")
	if err := os.MkdirAll(overlay, 0o700); err != nil {
		return nil, err
	}
	var rel [3]string
	for i, dir := range []string{"default", filepath.Join("components", "mark-verified"), filepath.Join("components", "verify-on-latch")} {
		r, err := filepath.Rel(overlay, filepath.Join(c.Root, "manifests", dir))
		if err != nil {
			return nil, err
		}
		rel[i] = r
	}
	k := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [%q]\ncomponents: [%q, %q]\n", rel[0], rel[1], rel[2])
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(k), 0o600); err != nil {
		return nil, err
	}
	return cluster.Kustomize(overlay)
}

// setUp creates the Stages and lets the operator latch them all.
func (b *bench) setUp(ctx context.Context) error {
	say("creating %d busy Stages (status as Kargo keeps it, %d Apps each) and %d small ones", b.o.stages, driver.BusyApps, b.o.wide)
	var err error
	if b.busy, err = b.createStages(ctx, busyNS, b.o.stages, true); err != nil {
		return err
	}
	if b.wide, err = b.createStages(ctx, wideNS, b.o.wide, false); err != nil {
		return err
	}
	if one, err := b.busy[0].Get(ctx); err == nil {
		if body, err := one.MarshalJSON(); err == nil {
			say("one busy Stage is %.1f KB of JSON", float64(len(body))/1024)
		}
	}
	if b.o.shards > 0 {
		say("the Stages are spread over shards s0..s%d, one operator each", b.o.shards-1)
	}
	b.sayEtcdSize()
	if b.o.promotions > 0 {
		if err := b.createPromotions(ctx); err != nil {
			return err
		}
	}
	if err := b.startOperators(); err != nil {
		return err
	}
	// The operator stores a first record on every Stage, at its QPS, on a
	// machine the apiserver already saturates: allow for the scale.
	limit := 5*time.Minute + time.Duration(b.o.stages+b.o.wide)*200*time.Millisecond
	say("waiting for the operator to latch every Stage (at most %v)", limit)
	lastSaid := time.Now()
	var exited *operator
	if err := b.watcher.waitFor(ctx, limit, func(w *watcher) bool {
		if time.Since(lastSaid) > 30*time.Second {
			lastSaid = time.Now()
			say("   ... %d of %d Stages latched", w.latched[busyNS]+w.latched[wideNS], b.o.stages+b.o.wide)
		}
		exited = b.exited()
		return exited != nil || w.latched[busyNS] == b.o.stages && w.latched[wideNS] == b.o.wide
	}); err != nil {
		return err
	}
	if exited != nil {
		return exitError(exited)
	}
	b.watcher.mu.Lock()
	record := b.watcher.state[busyNS+"/"+b.busy[0].Name]
	b.watcher.mu.Unlock()
	say("one busy Stage's record (%s) is %d bytes", api.StateAnnotation, len(record))
	return nil
}

func (b *bench) createStages(ctx context.Context, ns string, n int, busy bool) ([]*driver.Stage, error) {
	return createEach(n, func(i int) (*driver.Stage, error) {
		var opts []driver.StageOption
		if b.o.shards > 0 {
			opts = append(opts, driver.WithShard(shardName(i%b.o.shards)))
		}
		if busy {
			opts = append(opts, driver.WithBusyApps())
		}
		annotations := map[string]string{api.PauseOnFailureAnnotation: "true"}
		if busy && b.verifies(i) {
			opts = b.verify.stageOptions(annotations, opts)
		}
		s, err := b.kargo.CreateStage(ctx, ns, fmt.Sprintf("stage-%05d", i), annotations, opts...)
		if err != nil {
			return s, err
		}
		if busy {
			return s, s.WriteBusyStatus(ctx, kargo.HealthHealthy)
		}
		if _, err := s.FinishPromotion(ctx, "Succeeded"); err != nil {
			return s, err
		}
		return s, s.SetHealth(ctx, kargo.HealthHealthy)
	})
}

// createEach creates n Stages with create(i), 16 at a time, and returns
// them in order, or the first error.
func createEach(n int, create func(i int) (*driver.Stage, error)) ([]*driver.Stage, error) {
	stages := make([]*driver.Stage, n)
	errs := make(chan error, n)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			s, err := create(i)
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

// clusterProcessRSS is the RSS of the cluster's own process of the binary
// bin: the one whose command line names the cluster's directory (other
// test clusters may run beside it).
func clusterProcessRSS(bin, dir string) (int64, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmdline), "\x00")
		if filepath.Base(args[0]) == bin && strings.Contains(string(cmdline), dir) {
			return rss(pid)
		}
	}
	return 0, fmt.Errorf("no %s process of %s", bin, dir)
}

func mb(b int64) string { return fmt.Sprintf("%.0f MB", float64(b)/(1<<20)) }
