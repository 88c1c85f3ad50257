// Command kargo-latch is the kargo-latch operator.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"github.com/kargo-latch/kargo-latch/cli"
	"github.com/kargo-latch/kargo-latch/controller"
	"github.com/kargo-latch/kargo-latch/controller/gatesetting"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/metrics"
)

// version is set at build time with -ldflags "-X main.version=…".
var version = "dev"

type options struct {
	kubeconfig string
	namespaces stringList
	workers    int
	qps        float64
	burst      int
	defaults   latch.Settings
	dryRun     bool
	// verifyOnLatch and rolloutsInstanceID: see controller.Config.
	verifyOnLatch      bool
	rolloutsInstanceID string
	// shard and defaultShard pick the Stages served, as Kargo's
	// controllers pick theirs (controller.Config).
	shard        string
	defaultShard bool
	// kargoControllerUsernames and kargoControllerRegex name Kargo's
	// controllers (kargoControllers).
	kargoControllerUsernames string
	kargoControllerRegex     string
	kargoControllers         *gatesetting.Setting

	metricsAddr      string
	profiling        bool
	probeAddr        string
	cacheSyncTimeout time.Duration

	leaderElect bool
	leaderNS    string
	leaderID    string
}

func main() {
	// The same binary is the people's CLI, and a kubectl plugin when named
	// kubectl-latch. SIGTERM is how a CI system cancels a step: a wait
	// then ends with its own exit code, not as if it had failed.
	if isCLI(os.Args) {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := cli.Program{Name: cliName(os.Args[0]), Version: version}.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
		stop()
		os.Exit(code)
	}
	opts, err := parseFlags(os.Args[1:])
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	err = run(ctx, opts)
	stop()
	if err != nil {
		klog.FromContext(ctx).Error(err, "kargo-latch stopped")
	}
	klog.Flush()
	if err != nil {
		os.Exit(1)
	}
}

func parseFlags(args []string) (*options, error) {
	fs := flag.NewFlagSet("kargo-latch", flag.ContinueOnError)
	o := &options{}
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "Path to a kubeconfig; in-cluster configuration when empty.")
	fs.Var(&o.namespaces, "namespace", "A Kargo project namespace to watch (repeatable); all namespaces when none is given.")
	fs.IntVar(&o.workers, "workers", 8, "Stages synced in parallel: a project-wide pause labels its Stages this many at a time.")
	// A project-wide pause of 500 Stages costs about 500 patches at once;
	// these defaults let it take effect within 2s (docs/performance.md).
	// The API server's priority and fairness still protects it.
	fs.Float64Var(&o.qps, "kube-api-qps", 200, "Sustained requests per second to the API server, per client.")
	fs.IntVar(&o.burst, "kube-api-burst", 500, "Burst of requests to the API server, per client.")
	fs.BoolVar(&o.defaults.PauseOnFailure, "pause-on-failure", false, "Default of kargo-latch.io/pause-on-failure: a failure pauses the Stage.")
	fs.DurationVar(&o.defaults.LatchDeadline, "latch-deadline", 30*time.Minute, "Default of kargo-latch.io/latch-deadline: time from a promotion to the first Healthy; 0 disables.")
	fs.DurationVar(&o.defaults.DegradedGrace, "degraded-grace", 5*time.Minute, "Default of kargo-latch.io/degraded-grace: how long a latched Stage may be Unhealthy or Unknown.")
	fs.BoolVar(&o.defaults.DrainOnPause, "drain-on-pause", true, "Default of kargo-latch.io/drain-on-pause: abort queued auto-promotions when a Stage is paused.")
	fs.BoolVar(&o.defaults.MarkVerified, "mark-verified", false, "Default of kargo-latch.io/mark-verified: when a cycle latches, mark its Freight verified in the Stage so that it flows downstream (needs the mark-verified rights).")
	fs.BoolVar(&o.verifyOnLatch, "enable-verify-on-latch", false, "Let Stages opt into verify-on-latch: watch the AnalysisRuns kargo-latch makes, and start a latched cycle's configured verification when Kargo has not (needs the verify-on-latch rights and Argo Rollouts' CRDs).")
	fs.BoolVar(&o.defaults.VerifyOnLatch, "verify-on-latch", false, "Default of kargo-latch.io/verify-on-latch (with --enable-verify-on-latch): once a cycle latches, start the Stage's configured verification as Kargo would, if Kargo has not.")
	fs.DurationVar(&o.defaults.VerifyGrace, "verify-grace", 10*time.Second, "How long after a latch Kargo is given to start its own verification before kargo-latch starts it (verify-on-latch).")
	fs.DurationVar(&o.defaults.TerminateAfter, "verify-terminate-after", 30*time.Second, "How long an AnalysisRun kargo-latch took out of Kargo's lookup (cut short) runs on before it is terminated, if Kargo's status does not follow it by then (at least 5s, and never less than --verify-grace).")
	fs.DurationVar(&o.defaults.VerifyPickupTimeout, "verify-pickup-timeout", 2*time.Minute, "How long an AnalysisRun kargo-latch made may show no phase before a Warning says that no Argo Rollouts analysis controller picked it up.")
	fs.StringVar(&o.rolloutsInstanceID, "rollouts-controller-instance-id", "", "Label the AnalysisRuns kargo-latch starts for this Argo Rollouts controller instance (argo-rollouts.argoproj.io/controller-instance-id), as Kargo's ROLLOUTS_CONTROLLER_INSTANCE_ID; set it to Kargo's value.")
	fs.DurationVar(&o.defaults.NewFailureWindow, "new-failure-window", 15*time.Minute, "A Stage first seen without a record (made while no replica led: a failover, an upgrade) whose promotion failed this recently is judged as failing now; older failures (a first install) are only recorded. 0 judges none.")
	fs.BoolVar(&o.dryRun, "dry-run", false, "Decide and report (Events, metrics, logs) but write nothing to Kargo objects. Its Lease is kargo-latch-dry-run (kargo-latch-dry-run-SHARD with --shard) unless --leader-election-id is given, so that it never takes the real operator's.")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "Address serving /metrics; 0 turns it off.")
	fs.BoolVar(&o.profiling, "profiling", false, "Serve Go's profiles (/debug/pprof/) beside /metrics, as Kubernetes' own components do with --profiling: for measuring memory and CPU, not for exposing to everyone who may scrape.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address serving /healthz and /readyz; 0 turns it off.")
	fs.DurationVar(&o.cacheSyncTimeout, "cache-sync-timeout", 2*time.Minute, "How long to wait for the informer caches at start before giving up on a reported list or watch error of the Stages' or StagePauses' caches (a missing CRD or RBAC right): the process exits non-zero with the reason, so that the Pod crash-loops visibly. Slow caches with no error are waited for; the Promotions' cache syncs in the background, and its errors never end the process (/readyz reports them); verify-on-latch's AnalysisRun caches are waited for by nothing, and their errors turn verify-on-latch off where they concern (/readyz notes them). 0 waits forever.")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "Elect a leader among replicas with a Lease; only the leader reconciles.")
	fs.StringVar(&o.leaderNS, "leader-election-namespace", "", "Namespace of the Lease; the Pod's own namespace when empty (kargo-latch outside a Pod).")
	fs.StringVar(&o.leaderID, "leader-election-id", "kargo-latch", "Name of the Lease; kargo-latch-SHARD with --shard SHARD unless given.")
	fs.StringVar(&o.shard, "shard", "", "Serve only the Stages (and their Promotions) labelled kargo.akuity.io/shard=SHARD, as the Kargo controller of that shard does. Run exactly one operator (one Deployment, its replicas sharing one Lease) per shard.")
	fs.BoolVar(&o.defaultShard, "default-shard", false, "Serve the Stages without a kargo.akuity.io/shard label, as Kargo's default controller does; with --shard, those of that shard too. Exactly one operator should. Without --shard and --default-shard: every Stage.")
	fs.StringVar(&o.kargoControllerUsernames, "kargo-controllers", gatesetting.DefaultKargoController, "Usernames of Kargo's controllers, comma-separated, as the pause gate's setting names them (Helm pauseGate.kargoControllers and kargoControllerServiceAccount; kustomize kargo-latch-kargo-controllers): a Promotion one of them creates with a kubernetes: create-actor is reported GateBypassed. Compared at start with the installed pause-gate policies (a GateSettingDiffers Warning where they differ).")
	fs.StringVar(&o.kargoControllerRegex, "kargo-controller-regex", "", "A regular expression (matched whole) for more usernames of Kargo's controllers, as the pause gate's setting (Helm pauseGate.kargoControllerRegex).")
	klog.InitFlags(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	var err error
	if o.kargoControllers, err = gatesetting.Parse(o.kargoControllerUsernames, o.kargoControllerRegex); err != nil {
		return nil, fmt.Errorf("--kargo-controller-regex: %w", err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	if err := validateShard(o.shard); err != nil {
		return nil, err
	}
	if !flagSet(fs, "leader-election-id") {
		if err := validateShardLease(o.shard); err != nil {
			return nil, err
		}
		o.leaderID = leaseName(o.dryRun, o.shard)
		if errs := validation.IsDNS1123Subdomain(o.leaderID); len(errs) > 0 {
			return nil, fmt.Errorf("--shard %q makes the Lease name %q, which is not a valid object name (%s); give the Lease's name with --leader-election-id",
				o.shard, o.leaderID, strings.Join(errs, "; "))
		}
	}
	if o.defaults.LatchDeadline < 0 || o.defaults.DegradedGrace < 0 || o.defaults.NewFailureWindow < 0 ||
		o.defaults.VerifyGrace < 0 || o.defaults.VerifyPickupTimeout < 0 {
		return nil, errors.New("--latch-deadline, --degraded-grace, --new-failure-window, --verify-grace and --verify-pickup-timeout must not be negative")
	}
	if o.defaults.TerminateAfter < minTerminateAfter {
		return nil, fmt.Errorf("--verify-terminate-after must be at least %s: it is the time a lookup of Kargo's, made just before a run left it, has to show in Kargo's status", minTerminateAfter)
	}
	if o.defaults.VerifyOnLatch && !o.verifyOnLatch {
		return nil, errors.New("--verify-on-latch needs --enable-verify-on-latch (the verify-on-latch rights and Argo Rollouts' CRDs): without it every Stage would be warned that it cannot verify on latch")
	}
	if o.cacheSyncTimeout < 0 {
		return nil, errors.New("--cache-sync-timeout must not be negative")
	}
	if o.workers < 1 {
		return nil, errors.New("--workers must be at least 1")
	}
	return o, nil
}

func run(ctx context.Context, o *options) error {
	cfg, err := restConfig(o.kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	cfg.UserAgent = "kargo-latch/" + version

	cl, err := newClients(cfg)
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	c, err := controller.New(controller.Config{
		Dynamic:          cl.dynamic,
		StageClient:      cl.stages,
		Kube:             cl.kube,
		Namespaces:       o.namespaces,
		Shard:            o.shard,
		DefaultShard:     o.defaultShard,
		Defaults:         o.defaults,
		Workers:          o.workers,
		DryRun:           o.dryRun,
		Metrics:          metrics.New(reg, version),
		QueueMetrics:     metrics.NewWorkqueueProvider(reg),
		CacheSyncTimeout: o.cacheSyncTimeout,
		GateSetting:      o.kargoControllers,

		VerifyOnLatch:      o.verifyOnLatch,
		RolloutsInstanceID: o.rolloutsInstanceID,
	})
	if err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Starting kargo-latch", "version", version, "namespaces", o.namespaces, "dryRun", o.dryRun,
		"shard", o.shard, "defaultShard", o.defaultShard, "stages", stagesServed(o.shard, o.defaultShard))
	if err := serveMetrics(ctx, o.metricsAddr, reg, o.profiling); err != nil {
		return fmt.Errorf("metrics server: %w", err)
	}
	// Ready once the caches are synced, leader or standby alike; until
	// then /readyz says why not.
	if err := serveProbes(ctx, o.probeAddr, c.Ready, c.ReadyNotes); err != nil {
		return fmt.Errorf("health probe server: %w", err)
	}
	if err := c.Start(ctx); err != nil {
		return err
	}
	if !o.leaderElect {
		c.RunWorkers(ctx)
		return nil
	}
	ns := o.leaderNS
	if ns == "" {
		ns = podNamespace("kargo-latch")
	}
	klog.FromContext(ctx).Info("Electing a leader", "lease", klog.KRef(ns, o.leaderID))
	leadOrStandBy(ctx, cl.leases, ns, o.leaderID, c.RunWorkers)
	return nil
}

// isCLI reports whether the process is the CLI: named as the kubectl plugin,
// or called with one of the CLI's commands (the operator takes only flags).
func isCLI(args []string) bool {
	if cliName(args[0]) == kubectlPlugin {
		return true
	}
	return len(args) > 1 && slices.Contains(cli.Commands, args[1])
}

// kubectlPlugin is the binary's name as a kubectl plugin: kubectl runs
// kubectl-latch for "kubectl latch".
const kubectlPlugin = "kubectl-latch"

// cliName is the CLI's name in its help and completion scripts.
func cliName(arg0 string) string {
	if strings.HasPrefix(filepath.Base(arg0), kubectlPlugin) {
		return kubectlPlugin
	}
	return "kargo-latch"
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		return rest.InClusterConfig()
	}
	return clientcmd.BuildConfigFromFlags("", kubeconfig)
}

// stringList is a repeatable string flag.
type stringList []string

func (s *stringList) String() string { return strings.Join(*s, ",") }

func (s *stringList) Set(v string) error {
	for part := range strings.SplitSeq(v, ",") {
		if part = strings.TrimSpace(part); part != "" {
			*s = append(*s, part)
		}
	}
	return nil
}

// dryRunLeaseName is the default Lease of a --dry-run operator: one that
// shadows the real operator must not take the real one's Lease and stop it.
const dryRunLeaseName = "kargo-latch-dry-run"

// flagSet reports whether the flag name was given.
func flagSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

// minTerminateAfter is the least --verify-terminate-after.
const minTerminateAfter = 5 * time.Second
