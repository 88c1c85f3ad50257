package cluster

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"k8s.io/client-go/dynamic"
)

// Argo Rollouts' analysis controller, built from its Go module by `make
// rollouts` into bin/, with its CRDs beside it. It is the real engine that
// runs the AnalysisRuns of a Stage's verification: Kargo creates the runs
// and only reads their results.
const (
	rolloutsBinary = "rollouts-controller"
	rolloutsCRDDir = "rollouts-crds"
	// rolloutsNamespace is where it looks for its argo-rollouts-config
	// ConfigMap (none here: its defaults).
	rolloutsNamespace = "argo-rollouts"
)

// rolloutsStarted is the line the analysis controller logs once its
// informers have synced and its workers run (analysis/controller.go).
var rolloutsStarted = regexp.MustCompile(`Started \d+ analysis workers`)

// RolloutsOptions tune StartRollouts.
type RolloutsOptions struct {
	// InstanceID is the controller's --instance-id: it then runs only the
	// AnalysisRuns labelled argo-rollouts.argoproj.io/controller-instance-id
	// with this value (Kargo's ROLLOUTS_CONTROLLER_INSTANCE_ID). Without it,
	// only runs without that label.
	InstanceID string
	// LogLevel is its --loglevel (debug, info, warn, error); info when empty.
	LogLevel string
}

// Rollouts is a running Argo Rollouts controller that runs only its
// analysis controller.
type Rollouts struct {
	// InstanceID is the instance ID it runs with, if any.
	InstanceID string
	// MetricsPort and HealthzPort are its free ports. It listens on them on
	// every interface (its listen address is not configurable).
	MetricsPort, HealthzPort int
	// Log is the file its output goes to, in the cluster's directory.
	Log string

	cmd *exec.Cmd
}

// InstallRolloutsCRDs installs Argo Rollouts' AnalysisTemplate,
// ClusterAnalysisTemplate and AnalysisRun CRDs from bin/rollouts-crds and
// waits until they are established: what an operator with verify-on-latch
// needs to start, with or without an analysis controller.
func (c *Cluster) InstallRolloutsCRDs(ctx context.Context) error {
	crds := filepath.Join(c.Root, "bin", rolloutsCRDDir)
	if _, err := os.Stat(crds); err != nil {
		return fmt.Errorf("bin/%s is missing: run `make rollouts` first (it builds Argo Rollouts' controller and copies its CRDs from Go modules)", rolloutsCRDDir)
	}
	client, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	if err := InstallCRDs(ctx, client, crds); err != nil {
		return fmt.Errorf("installing Argo Rollouts' CRDs: %w", err)
	}
	return nil
}

// StartRollouts installs Argo Rollouts' AnalysisTemplate,
// ClusterAnalysisTemplate and AnalysisRun CRDs (waiting until established)
// and runs bin/rollouts-controller --controllers analysis against the
// cluster as its admin, without leader election, on free ports. It returns
// once the analysis workers run. Several may run on one cluster with
// different instance IDs.
func (c *Cluster) StartRollouts(ctx context.Context, opts RolloutsOptions) (_ *Rollouts, err error) {
	binary := filepath.Join(c.Root, "bin", rolloutsBinary)
	crds := filepath.Join(c.Root, "bin", rolloutsCRDDir)
	for _, p := range []string{binary, crds} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("bin/%s is missing: run `make rollouts` first (it builds Argo Rollouts' controller from Go modules)", filepath.Base(p))
		}
	}
	if err := c.InstallRolloutsCRDs(ctx); err != nil {
		return nil, err
	}
	ports, err := FreePorts(2)
	if err != nil {
		return nil, err
	}
	name := "rollouts"
	if opts.InstanceID != "" {
		name += "-" + opts.InstanceID
	}
	kubeconfig := filepath.Join(c.Dir, name+".kubeconfig")
	if err := WriteKubeconfig(kubeconfig, c.Config, ""); err != nil {
		return nil, err
	}
	logLevel := opts.LogLevel
	if logLevel == "" {
		logLevel = "info"
	}
	r := &Rollouts{InstanceID: opts.InstanceID, MetricsPort: ports[0], HealthzPort: ports[1],
		Log: filepath.Join(c.Dir, name+".log")}
	args := []string{
		"--kubeconfig", kubeconfig,
		"--controllers", "analysis",
		"--leader-elect=false",
		"--metricsPort", strconv.Itoa(r.MetricsPort),
		"--healthzPort", strconv.Itoa(r.HealthzPort),
		"--loglevel", logLevel,
	}
	if opts.InstanceID != "" {
		args = append(args, "--instance-id", opts.InstanceID)
	}
	if err := c.startRollouts(r, args...); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			r.Stop()
		}
	}()
	return r, r.waitStarted(ctx)
}

// Stop kills the controller. AnalysisRuns stay as they are.
func (r *Rollouts) Stop() {
	if r == nil || r.cmd == nil || r.cmd.Process == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
}

// MetricsURL is its Prometheus metrics endpoint.
func (r *Rollouts) MetricsURL() string {
	return "http://127.0.0.1:" + strconv.Itoa(r.MetricsPort) + "/metrics"
}

func (r *Rollouts) waitStarted(ctx context.Context) error {
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if exited(r.cmd) {
			return fmt.Errorf("rollouts-controller exited during start; see %s", r.Log)
		}
		if b, err := os.ReadFile(r.Log); err == nil && rolloutsStarted.Match(b) && r.healthy(ctx) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("rollouts-controller's analysis workers not started after 90s; see %s", r.Log)
}

func (r *Rollouts) healthy(ctx context.Context) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+strconv.Itoa(r.HealthzPort)+"/healthz", nil)
	if err != nil {
		return false
	}
	resp, err := (&http.Client{Timeout: time.Second}).Do(req)
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// LogContains tells whether the controller's log holds s so far.
func (r *Rollouts) LogContains(s string) (bool, error) {
	b, err := os.ReadFile(r.Log)
	if err != nil {
		return false, err
	}
	return bytes.Contains(b, []byte(s)), nil
}

// startRollouts runs the controller with its output in r.Log (c.start
// names the log after the program; several controllers may run here).
func (c *Cluster) startRollouts(r *Rollouts, args ...string) error {
	logFile, err := os.OpenFile(r.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer func() { _ = logFile.Close() }() // the child has its own copy
	cmd := exec.Command(filepath.Join(c.Root, "bin", rolloutsBinary), args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Its defaults namespace (for its optional ConfigMap) when not in a Pod.
	cmd.Env = append(os.Environ(), "POD_NAMESPACE="+rolloutsNamespace)
	// Die with the test process, whatever way it ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", rolloutsBinary, err)
	}
	r.cmd = cmd
	return nil
}
