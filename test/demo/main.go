// Command demo plays kargo-latch's main job on a local test cluster, the way
// it runs in a real one. It starts kube-apiserver and etcd (built from Go
// modules), installs Kargo's CRDs and kargo-latch's shipped manifests, runs
// two replicas of the real binary with leader election as their own
// ServiceAccount, and drives a Kargo project through two stories while
// narrating: Apps that flap out of phase, latched per App, the Stage's
// configured analysis started by kargo-latch and run by Argo Rollouts' real
// analysis controller, and the Freight marked verified so that it flows
// downstream; then a failure that pauses a Stage until a person resumes it.
// Run it with `make demo`; DEMO_KEEP=1 keeps the cluster up; DEMO_NODE=1
// runs kargo-latch as the chart's Pods on a real node instead (node.go).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kargo-latch/kargo-latch/test/cluster"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

const project = "shop"

// Static users of the local cluster (throwaway tokens).
//
//nolint:gosec // a throwaway local cluster
const (
	kargoToken = "demo-kargo-controller"
	devToken   = "demo-dev"
	leadToken  = "demo-lead"
)

var start = time.Now()

func say(format string, args ...any) {
	fmt.Printf("[%5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "demo failed:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context) error {
	if os.Getenv("DEMO_NODE") != "" {
		return runOnNode(ctx)
	}
	say("Starting a local kube-apiserver v1.37.2 and etcd v3.7.0 (built from Go modules into bin/)")
	c, err := cluster.Start(ctx, cluster.Options{
		Log:    func(f string, a ...any) { say("  "+f, a...) },
		Tokens: demoTokens(),
	})
	if err != nil {
		return err
	}
	defer c.Stop()
	say("Starting Argo Rollouts' analysis controller v1.10.2 (bin/rollouts-controller --controllers analysis) with its CRDs")
	rollouts, err := c.StartRollouts(ctx, cluster.RolloutsOptions{})
	if err != nil {
		return err
	}
	defer rollouts.Stop()
	metric := driver.NewMetricServer()
	defer metric.Close()
	d, err := setUp(ctx, c)
	if err != nil {
		return err
	}
	d.rollouts, d.metric = rollouts, metric
	defer d.stopReplicas()
	if d.dashboard, err = d.startDashboard(); err != nil {
		return err
	}
	defer d.dashboard.stop()
	say("")
	say("Watch it on a page: %sprojects/%s/  (kargo-latch dashboard, as lead; it pauses and resumes too)", d.dashboard.url, project)
	if err := d.play(ctx); err != nil {
		// The cluster's directory, logs included, goes with the cluster.
		for _, r := range d.replicas {
			fmt.Fprintf(os.Stderr, "last lines of %s's log:\n%s\n", r.name, tail(r.log, 30))
		}
		fmt.Fprintf(os.Stderr, "last lines of Argo Rollouts' log:\n%s\n", tail(rollouts.Log, 20))
		return err
	}
	if os.Getenv("DEMO_KEEP") != "" {
		return d.keep(ctx)
	}
	return nil
}

// demoTokens are the static users of the demo's people and Kargo.
func demoTokens() []string {
	return []string{
		kargoToken + ",system:serviceaccount:kargo:kargo-controller,kargo-controller,",
		devToken + ",dev,dev,",
		leadToken + ",lead,lead,",
	}
}

type demo struct {
	cluster  *cluster.Cluster
	admin    dynamic.Interface
	kube     kubernetes.Interface
	kargo    dynamic.Interface // as Kargo's controller
	dev      dynamic.Interface // bound to kargo-latch-pauser
	lead     dynamic.Interface // bound to kargo-latch-resumer
	replicas []*replica
	// dashboard is `kargo-latch dashboard` as lead, for people to watch.
	dashboard *dashboard
	rollouts  *cluster.Rollouts    // Argo Rollouts' analysis controller
	metric    *driver.MetricServer // the endpoint of the first story's web metric
	// kubeconfigs of the people, for the CLI.
	adminKubeconfig, devKubeconfig, leadKubeconfig string
}

type replica struct {
	name       string
	cmd        *exec.Cmd
	log        string
	metricsURL string
}

func setUp(ctx context.Context, c *cluster.Cluster) (*demo, error) {
	d := &demo{
		cluster: c,
		admin:   dynamic.NewForConfigOrDie(c.Config),
		kube:    kubernetes.NewForConfigOrDie(c.Config),
		kargo:   dynamic.NewForConfigOrDie(c.UserConfig(kargoToken)),
		dev:     dynamic.NewForConfigOrDie(c.UserConfig(devToken)),
		lead:    dynamic.NewForConfigOrDie(c.UserConfig(leadToken)),
	}
	objs, err := installWithOptIns(c)
	if err != nil {
		return nil, err
	}
	objs = append(objs, demoRBAC()...)
	objs = append(objs, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": project, "labels": map[string]any{"kargo.akuity.io/project": "true"}},
	}})
	if err := cluster.Apply(ctx, c.Config, objs...); err != nil {
		return nil, err
	}
	say("  applied manifests/default: the StagePause CRD, kargo-latch's RBAC, the pause gate and the people's roles")
	say("  and components/mark-verified and verify-on-latch (an overlay, as in your own repo): kargo-latch may")
	say("  mark Freight verified, and start a Stage's configured analysis (AnalysisRuns in Kargo's shape only)")
	say("  dev is bound to kargo-latch-pauser, lead to kargo-latch-resumer, in project %q", project)

	for who, cfg := range map[*string]string{&d.adminKubeconfig: cluster.AdminToken, &d.devKubeconfig: devToken, &d.leadKubeconfig: leadToken} {
		*who = filepath.Join(c.Dir, "kubeconfig-"+cfg)
		if err := cluster.WriteKubeconfig(*who, c.UserConfig(cfg), project); err != nil {
			return nil, err
		}
	}
	saCfg, err := c.ServiceAccountConfig(ctx, "kargo-latch", "kargo-latch")
	if err != nil {
		return nil, err
	}
	saKubeconfig := filepath.Join(c.Dir, "kubeconfig-kargo-latch")
	if err := cluster.WriteKubeconfig(saKubeconfig, saCfg, ""); err != nil {
		return nil, err
	}
	for _, name := range []string{"replica-a", "replica-b"} {
		r, err := startReplica(c, name, saKubeconfig)
		if err != nil {
			return nil, err
		}
		d.replicas = append(d.replicas, r)
		time.Sleep(300 * time.Millisecond) // let replica-a win the first election
	}
	say("  started 2 replicas of bin/kargo-latch with --leader-elect --enable-verify-on-latch --verify-grace %s,", verifyGrace)
	say("  as ServiceAccount kargo-latch/kargo-latch")
	return d, nil
}

func startReplica(c *cluster.Cluster, name, kubeconfig string) (*replica, error) {
	ports, err := cluster.FreePorts(2)
	if err != nil {
		return nil, err
	}
	r := &replica{name: name, log: filepath.Join(c.Dir, name+".log"),
		metricsURL: "http://127.0.0.1:" + strconv.Itoa(ports[0]) + "/metrics"}
	logFile, err := os.Create(r.log)
	if err != nil {
		return nil, err
	}
	r.cmd = exec.Command(filepath.Join(c.Root, "bin", "kargo-latch"),
		"--kubeconfig", kubeconfig, "--namespace", project,
		"--leader-elect", "--leader-election-namespace", "kargo-latch",
		// The component adds this flag to Deployments; the demo runs the
		// binary itself.
		"--enable-verify-on-latch", "--verify-grace", verifyGrace.String(),
		"--metrics-bind-address", "127.0.0.1:"+strconv.Itoa(ports[0]),
		"--health-probe-bind-address", "127.0.0.1:"+strconv.Itoa(ports[1]))
	r.cmd.Stdout, r.cmd.Stderr = logFile, logFile
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := r.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting bin/kargo-latch (run `make build`): %w", err)
	}
	return r, nil
}

func (d *demo) stopReplicas() {
	for _, r := range d.replicas {
		if r.cmd.Process != nil {
			_ = r.cmd.Process.Signal(syscall.SIGTERM)
			_ = r.cmd.Wait()
		}
	}
}

// tail is the last n lines of a file.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// keep leaves the cluster and the operator running until interrupted.
func (d *demo) keep(ctx context.Context) error {
	say("")
	say("DEMO_KEEP is set: the cluster, both replicas and the dashboard keep running.")
	say("  The page, as lead (may pause and resume): %sprojects/%s/", d.dashboard.url, project)
	say("  In another shell:")
	say("  export KUBECONFIG=%s", d.adminKubeconfig)
	say("  go run ./cmd/kargo-latch status -n %s        # or: kubectl get stages,stagepauses -n %s", project, project)
	say("Press Ctrl-C to stop and clean up.")
	<-ctx.Done()
	return nil
}

// verifyGrace is how long after a latch kargo-latch lets Kargo start its
// own verification before it starts it (10s by default): short, so that
// the story fits on a screen.
const verifyGrace = 2 * time.Second

// installWithOptIns renders what an operator of kargo-latch would apply to
// let it mark Freight verified and verify on latch: an overlay of their own
// that takes the default install and adds the opt-in mark-verified and
// verify-on-latch components.
func installWithOptIns(c *cluster.Cluster) ([]*unstructured.Unstructured, error) {
	overlay := filepath.Join(c.Dir, "overlay")
	if err := os.MkdirAll(overlay, 0o700); err != nil {
		return nil, err
	}
	install, err := filepath.Rel(overlay, filepath.Join(c.Root, "manifests", "default"))
	if err != nil {
		return nil, err
	}
	var components []string
	for _, name := range []string{"mark-verified", "verify-on-latch"} {
		component, err := filepath.Rel(overlay, filepath.Join(c.Root, "manifests", "components", name))
		if err != nil {
			return nil, err
		}
		components = append(components, strconv.Quote(component))
	}
	kustomization := fmt.Sprintf("apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [%q]\ncomponents: [%s]\n", install, strings.Join(components, ", "))
	if err := os.WriteFile(filepath.Join(overlay, "kustomization.yaml"), []byte(kustomization), 0o600); err != nil {
		return nil, err
	}
	return cluster.Kustomize(overlay)
}

func demoRBAC() []*unstructured.Unstructured {
	return []*unstructured.Unstructured{
		cluster.NewClusterRole("demo-kargo-controller", cluster.Rule("kargo.akuity.io", "promotions", "create")),
		cluster.NewClusterRole("demo-viewer", cluster.Rule("kargo.akuity.io", "stages", "get", "list")),
		cluster.BindUser("demo-kargo-controller", "demo-kargo-controller", "system:serviceaccount:kargo:kargo-controller"),
		cluster.BindUser("demo-dev-pauser", "kargo-latch-pauser", "dev"),
		cluster.BindUser("demo-dev-viewer", "demo-viewer", "dev"),
		cluster.BindUser("demo-lead-resumer", "kargo-latch-resumer", "lead"),
		cluster.BindUser("demo-lead-viewer", "demo-viewer", "lead"),
	}
}

var errGate = errors.New("the gate let an auto-promotion through to a paused Stage")
