package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	clidashboard "github.com/kargo-latch/kargo-latch/cli/dashboard"
)

// dashboard is `kargo-latch dashboard`, run as lead (kargo-latch-resumer,
// who may pause and resume), so that a person can watch the stories on a
// page and, with DEMO_KEEP=1, click through them afterwards.
type dashboard struct {
	cmd *exec.Cmd
	url string
}

// startDashboard runs bin/kargo-latch dashboard on DEMO_DASHBOARD_PORT
// (3100 unless set; 0 picks a free port), or on a free port when that one
// is taken, and returns once it serves.
func (d *demo) startDashboard() (*dashboard, error) {
	port := os.Getenv("DEMO_DASHBOARD_PORT")
	if port == "" {
		port = "3100"
	}
	db, err := d.runDashboard(port)
	if err != nil && port != "0" {
		say("  (port %s is taken: %v; the dashboard takes a free port)", port, err)
		db, err = d.runDashboard("0")
	}
	return db, err
}

func (d *demo) runDashboard(port string) (*dashboard, error) {
	log, err := os.Create(filepath.Join(d.cluster.Dir, "dashboard.log"))
	if err != nil {
		return nil, err
	}
	//nolint:gosec // the demo runs its own build of kargo-latch, with its own arguments
	cmd := exec.Command(filepath.Join(d.cluster.Root, "bin", "kargo-latch"), "dashboard",
		"--kubeconfig", d.leadKubeconfig, "-n", project, "--port", port)
	cmd.Stderr = log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting bin/kargo-latch dashboard (run `make build`): %w", err)
	}
	lines := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			select {
			case lines <- s.Text():
			default:
			}
		}
		close(lines)
	}()
	select {
	case line, ok := <-lines:
		if url := clidashboard.AddressIn(line); ok && url != "" {
			return &dashboard{cmd: cmd, url: url}, nil
		}
		_ = cmd.Wait()
		b, _ := os.ReadFile(log.Name())
		return nil, fmt.Errorf("the dashboard did not start: %s", strings.TrimSpace(string(b)))
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return nil, fmt.Errorf("the dashboard did not start within 30s (log: %s)", log.Name())
	}
}

func (db *dashboard) stop() {
	if db != nil && db.cmd.Process != nil {
		_ = db.cmd.Process.Signal(syscall.SIGTERM)
		_ = db.cmd.Wait()
	}
}
