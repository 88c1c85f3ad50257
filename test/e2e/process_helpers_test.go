package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"

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
	if operatorBinary.err != nil {
		t.Fatal(operatorBinary.err)
	}
	return operatorBinary.path
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
	p.cmd = exec.Command(buildOperator(p.t), p.args...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	done := make(chan struct{})
	p.done = done
	go func(cmd *exec.Cmd) { _ = cmd.Wait(); close(done) }(p.cmd)
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
