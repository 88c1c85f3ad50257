package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/rest"

	"github.com/kargo-latch/kargo-latch/test/cluster"
)

var operatorBinary struct {
	once sync.Once
	path string
	err  error
}

// buildOperator builds the real kargo-latch binary once per test run.
func buildOperator(t *testing.T) string {
	t.Helper()
	path, err := operatorPath()
	must(t, err)
	return path
}

// operatorPath is buildOperator returning its error.
func operatorPath() (string, error) {
	operatorBinary.once.Do(func() {
		dir, err := os.MkdirTemp("", "kargo-latch-bin-")
		if err != nil {
			operatorBinary.err = err
			return
		}
		operatorBinary.path = filepath.Join(dir, "kargo-latch")
		cmd := exec.Command("go", "build", "-o", operatorBinary.path, "./cmd/kargo-latch")
		cmd.Dir = env.cluster.Root
		if out, err := cmd.CombinedOutput(); err != nil {
			operatorBinary.err = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	return operatorBinary.path, operatorBinary.err
}

// writeKubeconfig writes a kubeconfig for cfg's host and bearer token.
func writeKubeconfig(t *testing.T, cfg *rest.Config) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := cluster.WriteKubeconfig(path, cfg, ""); err != nil {
		t.Fatal(err)
	}
	return path
}

// process is the operator binary running as its own ServiceAccount.
type process struct {
	t    *testing.T
	args []string
	log  *os.File
	cmd  *exec.Cmd
	done chan struct{}
	// metrics is where the process serves /metrics; empty when it does
	// not (see newMeteredProcess).
	metrics metricsAt
	// binary is the executable to run; nil runs operatorPath's. env,
	// when not nil, is its whole environment; dir its working directory;
	// cred its user. verify checks the process just started. See
	// runFromImage.
	binary func() (string, error)
	env    []string
	dir    string
	cred   *syscall.Credential
	verify func(pid int) error
}

func newProcess(t *testing.T, args ...string) *process {
	t.Helper()
	return newProcessAs(t, env.operator, args...)
}

// newProcessAs is newProcess with another identity or cluster.
func newProcessAs(t *testing.T, cfg *rest.Config, args ...string) *process {
	t.Helper()
	log, err := os.Create(filepath.Join(t.TempDir(), "operator.log"))
	if err != nil {
		t.Fatal(err)
	}
	p := &process{t: t, log: log,
		args: append([]string{"--kubeconfig", writeKubeconfig(t, cfg)}, args...)}
	t.Cleanup(func() {
		p.kill()
		_ = log.Close()
		if t.Failed() {
			b, _ := os.ReadFile(log.Name())
			if len(b) > 20000 {
				b = b[len(b)-20000:]
			}
			t.Logf("operator log (tail):\n%s", b)
		}
	})
	return p
}

func (p *process) start() {
	p.t.Helper()
	must(p.t, p.launch())
}

// launch is start returning its error, for a goroutine that restarts the
// process (t.Fatal must not be called there).
func (p *process) launch() error {
	binary := operatorPath
	if p.binary != nil {
		binary = p.binary
	}
	path, err := binary()
	if err != nil {
		return err
	}
	p.cmd = exec.Command(path, p.args...)
	p.cmd.Env, p.cmd.Dir = p.env, p.dir
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: p.cred}
	if err := p.cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	p.done = done
	go func(cmd *exec.Cmd) { _ = cmd.Wait(); close(done) }(p.cmd)
	if p.verify != nil {
		if err := p.verify(p.cmd.Process.Pid); err != nil {
			p.kill()
			return err
		}
	}
	return nil
}

// exited reports whether the process ended by itself.
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL, as an OOM kill or a node failure would.
func (p *process) kill() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	p.cmd = nil
}

// newMeteredProcess is newProcessAs whose /metrics is served on a free
// loopback port (the same one across restarts), so that the test can read
// its work: see caughtUp. Its flag comes after args and wins.
func newMeteredProcess(t *testing.T, cfg *rest.Config, args ...string) *process {
	t.Helper()
	ports, err := cluster.FreePorts(1)
	must(t, err)
	addr := "127.0.0.1:" + strconv.Itoa(ports[0])
	p := newProcessAs(t, cfg, append(args, "--metrics-bind-address", addr)...)
	p.metrics = metricsAt("http://" + addr + "/metrics")
	return p
}

func (p *process) work() (work, error) {
	if p.metrics == "" {
		return work{}, errors.New("the process serves no metrics (see newMeteredProcess)")
	}
	return p.metrics.work()
}

// awaitSync waits until the process, in its current run, has synced a
// Stage, and reports true; or false once stop is closed. A kill loop lets
// every other run get that far, so that its scenario progresses however
// slowly a loaded machine starts the process; the other runs die at any
// moment, start-up included.
func (p *process) awaitSync(stop <-chan struct{}) bool {
	for w, err := p.work(); err != nil || w.syncs < 1; w, err = p.work() {
		select {
		case <-stop:
			return false
		case <-time.After(25 * time.Millisecond):
		}
	}
	return true
}

// caughtUp waits until the process, in its current run, has synced and is
// idle. A run's first leadership term queues every Stage it caches before
// its first sync, so every Stage has then been judged by this run: what a
// restart could do again, it has done.
func (p *process) caughtUp(t *testing.T) {
	t.Helper()
	waitIdle(t, p, 1)
}

// metricsAt is the URL of an operator process's /metrics, read as a meter.
type metricsAt string

func (u metricsAt) work() (work, error) {
	code, body, err := httpGet(string(u))
	if err != nil {
		return work{}, err
	}
	if code != http.StatusOK {
		return work{}, fmt.Errorf("GET %s: status %d", u, code)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	mfs, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		return work{}, fmt.Errorf("parsing %s: %w", u, err)
	}
	return workFrom(func(name string) float64 {
		total := 0.0
		for _, v := range series(mfs, name, nil) {
			total += v
		}
		return total
	}), nil
}

// logSize is how much the process has logged so far, across its restarts.
func (p *process) logSize() int64 {
	fi, err := p.log.Stat()
	must(p.t, err)
	return fi.Size()
}

// logText is what the process has logged after offset (a logSize; 0 for
// all), across its restarts.
func (p *process) logText(offset int64) string {
	b, err := os.ReadFile(p.log.Name())
	must(p.t, err)
	if offset > int64(len(b)) {
		return ""
	}
	return string(b[offset:])
}
