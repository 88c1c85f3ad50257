package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/kargo-latch/kargo-latch/test/cluster"
)

// operator is one kargo-latch process the bench runs: the only one, or the
// one of a shard. Each has its own metrics and probe ports and its own log.
type operator struct {
	shard      string // its --shard; empty when unsharded
	cmd        *exec.Cmd
	done       chan struct{}
	logPath    string
	probeURL   string
	metricsURL string
}

// shardName is the name of the k-th shard.
func shardName(k int) string { return fmt.Sprintf("s%d", k) }

// newOperators makes one operator per shard, or one unsharded operator.
func newOperators(dir string, shards int) []*operator {
	if shards == 0 {
		return []*operator{{logPath: filepath.Join(dir, "operator.log")}}
	}
	ops := make([]*operator, shards)
	for k := range ops {
		ops[k] = &operator{shard: shardName(k), logPath: filepath.Join(dir, "operator-"+shardName(k)+".log")}
	}
	return ops
}

// name says which operator this is, for progress lines and the table.
func (op *operator) name() string {
	if op.shard == "" {
		return "operator"
	}
	return "shard " + op.shard
}

// start runs bin/kargo-latch as the bench's ServiceAccount over both
// namespaces, with --shard when it is a shard's. It logs at -v=2, which
// names every Stage it writes ("Stored latch record"): the count of Stages
// written by two shards reads it, since the shards share one field manager.
func (b *bench) start(op *operator) error {
	ports, err := cluster.FreePorts(2)
	if err != nil {
		return err
	}
	op.probeURL = "http://127.0.0.1:" + strconv.Itoa(ports[0]) + "/readyz"
	op.metricsURL = "http://127.0.0.1:" + strconv.Itoa(ports[1]) + "/metrics"
	log, err := os.OpenFile(op.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	args := []string{"--kubeconfig", b.kubecfg,
		"--namespace", busyNS, "--namespace", wideNS, "--metrics-bind-address", "127.0.0.1:" + strconv.Itoa(ports[1]), "--mark-verified", "--profiling",
		"--health-probe-bind-address", "127.0.0.1:" + strconv.Itoa(ports[0]), "-v=2"}
	if op.shard != "" {
		args = append(args, "--shard", op.shard)
	}
	args = append(args, verifyArgs...)
	binary := binPath(b.c, "kargo-latch")
	if b.o.operator != "" {
		binary = b.o.operator
	}
	op.cmd = exec.Command(binary, args...)
	op.cmd.Stdout, op.cmd.Stderr = log, log
	// As manifests/base/deployment.yaml runs it.
	op.cmd.Env = append(os.Environ(), "GOGC=50")
	op.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := op.cmd.Start(); err != nil {
		_ = log.Close()
		return fmt.Errorf("starting bin/kargo-latch (make build): %w", err)
	}
	done := make(chan struct{})
	op.done = done
	go func(cmd *exec.Cmd) {
		_ = cmd.Wait()
		_ = log.Close()
		close(done)
		b.watcher.wake() // a wait on the watcher looks at exited()
	}(op.cmd)
	return nil
}

// exited is an operator that has exited, if any: a flag it refused, a
// crash. Its log says why.
func (b *bench) exited() *operator {
	for _, op := range b.operators {
		if op.cmd == nil {
			continue
		}
		select {
		case <-op.done:
			return op
		default:
		}
	}
	return nil
}

// exitError tells that op exited, with the end of its log.
func exitError(op *operator) error {
	tail, _ := os.ReadFile(op.logPath)
	if len(tail) > 2000 {
		tail = tail[len(tail)-2000:]
	}
	return fmt.Errorf("the %s exited (%s); the end of its log %s:\n%s", op.name(), op.cmd.ProcessState, op.logPath, tail)
}

// startOperators starts every operator.
func (b *bench) startOperators() error {
	for _, op := range b.operators {
		if err := b.start(op); err != nil {
			return err
		}
	}
	return nil
}

func (op *operator) stop() {
	if op.cmd != nil && op.cmd.Process != nil {
		_ = op.cmd.Process.Kill()
		<-op.done
		op.cmd = nil
	}
}

func (b *bench) stopOperators() {
	for _, op := range b.operators {
		op.stop()
	}
}

func (op *operator) ready() bool {
	resp, err := http.Get(op.probeURL) //nolint:noctx // loopback probe
	if err != nil {
		return false
	}
	_ = resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// saveHeapProfile keeps the operator's heap profile in the temporary
// directory (the cluster's own goes with it), for `go tool pprof` when the
// memory figure needs explaining. A failure only costs the profile.
func (op *operator) saveHeapProfile(ctx context.Context) {
	url := strings.TrimSuffix(op.metricsURL, "/metrics") + "/debug/pprof/heap"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, http.NoBody)
	if err != nil {
		return
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		say("heap profile: %v", err)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	file := "kargo-latch-bench-heap.pprof"
	if op.shard != "" {
		file = "kargo-latch-bench-heap-" + op.shard + ".pprof"
	}
	path := filepath.Join(os.TempDir(), file)
	f, err := os.Create(path)
	if err != nil {
		return
	}
	defer func() { _ = f.Close() }()
	if _, err := io.Copy(f, resp.Body); err == nil {
		say("heap profile of the %s: go tool pprof -sample_index=inuse_space %s", op.name(), path)
	}
}

// viewOperators is each operator's account of its work so far; an entry is
// nil when it cannot be read, which only loses the report.
func (b *bench) viewOperators(ctx context.Context) []metricsView {
	views := make([]metricsView, len(b.operators))
	for i, op := range b.operators {
		v, err := viewOperator(ctx, op.metricsURL)
		if err != nil {
			say("cannot read the %s's metrics: %v", op.name(), err)
		}
		views[i] = v
	}
	return views
}

// sayOperatorSide reports each operator's queue waits, sync durations,
// reconcile errors and retries during a phase.
func (b *bench) sayOperatorSide(ctx context.Context, phase string, before []metricsView) {
	after := b.viewOperators(ctx)
	for i, op := range b.operators {
		if before[i] == nil || after[i] == nil {
			continue
		}
		d := after[i].since(before[i])
		say("%s, inside the %s (churn included): %s", phase, op.name(), d.describe("queue wait, stages", "queue wait, urgent stages", "sync, stages",
			"failed syncs", "delayed adds (retries and timed requeues)", "Freight marked"))
	}
}
