package e2e

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kargo-latch/kargo-latch/cli"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// outputBuffer is a process's output, read by the test while it runs.
type outputBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (o *outputBuffer) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.Write(p)
}

func (o *outputBuffer) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.b.String()
}

// cliRun is the real binary running a CLI command that lasts (wait,
// status -w) as a person with cfg's credentials.
type cliRun struct {
	t              *testing.T
	args           []string
	cmd            *exec.Cmd
	stdout, stderr outputBuffer
	done           chan struct{}
	code           int
	endedAt        time.Time
}

func startCLI(t *testing.T, cfg *rest.Config, args ...string) *cliRun {
	t.Helper()
	r := &cliRun{t: t, args: args, done: make(chan struct{})}
	r.cmd = exec.Command(buildOperator(t), append(args, "--kubeconfig", writeKubeconfig(t, cfg))...)
	r.cmd.Stdout, r.cmd.Stderr = &r.stdout, &r.stderr
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	must(t, r.cmd.Start())
	go func() {
		defer close(r.done)
		defer func() { r.endedAt = time.Now() }()
		var exit *exec.ExitError
		if err := r.cmd.Wait(); errors.As(err, &exit) {
			r.code = exit.ExitCode()
		} else if err != nil {
			r.code = -1
		}
	}()
	t.Cleanup(func() {
		if !r.exited() {
			_ = r.cmd.Process.Kill()
			<-r.done
		}
		if t.Failed() {
			t.Logf("%v:\nstdout:\n%s\nstderr:\n%s", args, r.stdout.String(), r.stderr.String())
		}
	})
	return r
}

func (r *cliRun) exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// says waits until the command's output (stdout or stderr) holds want,
// failing if the command ends first.
func (r *cliRun) says(out *outputBuffer, want string) {
	r.t.Helper()
	waitFor(r.t, "kargo-latch "+r.args[0]+" to say "+want, func() bool {
		if strings.Contains(out.String(), want) {
			return true
		}
		if r.exited() {
			r.t.Fatalf("%v exited %d before saying %q", r.args, r.code, want)
		}
		return false
	})
}

// stillRunning fails the test if the command has ended.
func (r *cliRun) stillRunning(why string) {
	r.t.Helper()
	if r.exited() {
		r.t.Fatalf("%v exited %d, but %s", r.args, r.code, why)
	}
}

// exit waits for the command to end and returns its exit code.
func (r *cliRun) exit() int {
	r.t.Helper()
	return r.exitWithin(waitLimit)
}

// exitWithin is exit for a command that may take up to limit to end.
func (r *cliRun) exitWithin(limit time.Duration) int {
	r.t.Helper()
	select {
	case <-r.done:
		return r.code
	case <-time.After(limit):
		r.t.Fatalf("%v did not end within %v", r.args, limit)
		return 0
	}
}

// A pipeline promotes and waits right away, while the Stage still shows the
// previous cycle Latched: wait waits for the new promotion's cycle, not the
// old one, and exits 0 once it latches.
func TestCLIWaitLatched(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	startOperator(t, ns, fastSettings())
	prod := env.latchedStages(t, ns, "prod")[0]
	promotion, err := prod.StartPromotion(ctx)
	must(t, err)

	wait := startCLI(t, env.cluster.Config, "wait", "prod", "-n", ns, "--for=latched", "--timeout", "2m")
	wait.says(&wait.stderr, "promotion "+promotion+" is Running")
	_, err = prod.FinishPromotion(ctx, "Succeeded")
	must(t, err)
	must(t, prod.SetHealth(ctx, kargo.HealthProgressing))
	if r := waitPhase(t, prod, latch.PhasePromoted); r.Promotion != promotion {
		t.Fatalf("the new cycle is promotion %s's, want %s's", r.Promotion, promotion)
	}
	wait.says(&wait.stderr, "the cycle of promotion "+promotion+" is Promoted")
	wait.stillRunning("the new cycle has not latched")

	must(t, prod.SetHealth(ctx, kargo.HealthHealthy))
	if code := wait.exit(); code != cli.ExitOK {
		t.Fatalf("wait: exit %d, want 0", code)
	}
	if want := "stage " + ns + "/prod: the cycle of promotion " + promotion + " latched at "; !strings.HasPrefix(wait.stdout.String(), want) {
		t.Errorf("stdout %q, want %q...", wait.stdout.String(), want)
	}
}

// The promotion a pipeline waits for fails: wait exits 1 at once, with the
// reason.
func TestCLIWaitPromotionFails(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	startOperator(t, ns, fastSettings())
	prod := env.latchedStages(t, ns, "prod")[0]
	promotion, err := prod.StartPromotion(ctx)
	must(t, err)

	wait := startCLI(t, env.cluster.Config, "wait", "prod", "-n", ns, "--for=latched", "--promotion", promotion, "--timeout", "2m")
	wait.says(&wait.stderr, "promotion "+promotion+" is Running")
	_, err = prod.FinishPromotion(ctx, "Failed")
	must(t, err)
	if code := wait.exit(); code != cli.ExitFailed {
		t.Fatalf("wait: exit %d, want 1", code)
	}
	if want := "error: stage " + ns + "/prod: promotion " + promotion + " Failed"; !strings.Contains(wait.stderr.String(), want) {
		t.Errorf("stderr %q, want %q", wait.stderr.String(), want)
	}
}

// A Promotion just created is Pending, and the Stage does not show it yet:
// wait waits for it, and fails when it is aborted.
func TestCLIWaitPendingPromotionAborted(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	startOperator(t, ns, fastSettings())
	env.latchedStages(t, ns, "prod")
	p, err := driver.CreatePromotion(ctx, env.dyn, ns, "prod", "kubernetes:ci")
	must(t, err)

	wait := startCLI(t, env.cluster.Config, "wait", "prod", "-n", ns, "--for=latched", "--timeout", "2m")
	wait.says(&wait.stderr, "promotion "+p.GetName()+" is Pending")
	must(t, env.kargo.SetPromotionPhase(ctx, ns, p.GetName(), "Aborted"))
	if code := wait.exit(); code != cli.ExitFailed || !strings.Contains(wait.stderr.String(), "promotion "+p.GetName()+" was aborted") {
		t.Errorf("wait: exit %d, stderr %q; want 1 and the abort", code, wait.stderr.String())
	}
}

// The cycle itself fails (the latch deadline passes): wait exits 1 with the
// operator's reason.
func TestCLIWaitCycleFails(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	startOperator(t, ns, latch.Settings{LatchDeadline: 3 * time.Second, DegradedGrace: time.Minute})
	prod := env.createStage(t, ns, "prod", nil)
	_, err := prod.StartPromotion(ctx)
	must(t, err)
	_, err = prod.FinishPromotion(ctx, "Succeeded")
	must(t, err)
	must(t, prod.SetHealth(ctx, kargo.HealthProgressing))

	wait := startCLI(t, env.cluster.Config, "wait", "prod", "-n", ns, "--for=latched", "--timeout", "2m")
	if code := wait.exit(); code != cli.ExitFailed {
		t.Fatalf("wait: exit %d, want 1", code)
	}
	if want := "failed: LatchDeadlineExceeded: Stage was not Healthy within 3s"; !strings.Contains(wait.stderr.String(), want) {
		t.Errorf("stderr %q, want %q", wait.stderr.String(), want)
	}
}

// Nothing happens within --timeout: wait exits 3 and says what it saw last.
func TestCLIWaitTimesOut(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	startOperator(t, ns, fastSettings())
	prod := env.createStage(t, ns, "prod", nil)
	_, err := prod.StartPromotion(ctx)
	must(t, err)
	promotion, err := prod.FinishPromotion(ctx, "Succeeded")
	must(t, err)
	must(t, prod.SetHealth(ctx, kargo.HealthProgressing))
	waitPhase(t, prod, latch.PhasePromoted)

	// The timeout also covers the CLI's start (its clients and its watch),
	// which a loaded machine can stretch past a second or two; 8 s leaves
	// the watch time to report the cycle, well inside the latch deadline.
	started := time.Now()
	wait := startCLI(t, env.cluster.Config, "wait", "prod", "-n", ns, "--for=latched", "--timeout", "8s")
	if code := wait.exit(); code != cli.ExitTimeout {
		t.Fatalf("wait: exit %d, want 3", code)
	}
	if took := time.Since(started); took < 8*time.Second {
		t.Errorf("wait gave up after %v, before its timeout", took)
	}
	want := "error: timed out after 8s waiting for stage " + ns + "/prod to be latched; last seen: the cycle of promotion " + promotion + " is Promoted"
	if !strings.Contains(wait.stderr.String(), want) {
		t.Errorf("stderr %q, want %q", wait.stderr.String(), want)
	}
}

// Kargo verifies the latched cycle's Freight in the Stage (mark-verified is
// off): wait --for=verified sees it on the Freight and exits 0.
func TestCLIWaitVerified(t *testing.T) {
	t.Parallel()
	ns, prod, freight := latchedProd(t)

	wait := startCLI(t, env.cluster.Config, "wait", "prod", "-n", ns, "--for=verified", "--timeout", "2m")
	wait.says(&wait.stderr, "its Freight is not verified in the Stage yet")
	must(t, prod.MarkVerified(ctx, freight, time.Now()))
	checkWaitVerifiedExits(t, wait, freight)
}

// checkWaitVerifiedExits checks that a wait --for=verified exits 0 and
// says freight is verified in the Stage.
func checkWaitVerifiedExits(t *testing.T, wait *cliRun, freight string) {
	t.Helper()
	if code := wait.exit(); code != cli.ExitOK || !strings.Contains(wait.stdout.String(), "Freight "+freight+" is verified in the Stage") {
		t.Errorf("wait --for=verified: exit %d, stdout %q", code, wait.stdout.String())
	}
}

// version needs no cluster, and prints the build's version.
func TestCLIVersion(t *testing.T) {
	t.Parallel()
	out, errOut, code := runCLI(t, env.cluster.Config, "version", "--short")
	if code != 0 || strings.TrimSpace(out) == "" {
		t.Errorf("version: exit %d, %q %q", code, out, errOut)
	}
}

// A person pauses the Stage, then resumes it: waits for paused and for
// resumed end at each.
func TestCLIWaitPausedAndResumed(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	startOperator(t, ns, fastSettings())
	env.createStage(t, ns, "prod", nil)
	dev, lead := env.cluster.UserConfig(devToken), env.cluster.UserConfig(leadToken)

	paused := startCLI(t, env.cluster.Config, "wait", "prod", "-n", ns, "--for=paused", "--timeout", "2m")
	paused.says(&paused.stderr, "the Stage is not paused")
	if _, errOut, code := runCLI(t, dev, "pause", "prod", "-n", ns, "--reason", "Incident"); code != 0 {
		t.Fatalf("pause: exit %d: %s", code, errOut)
	}
	if code := paused.exit(); code != cli.ExitOK || !strings.Contains(paused.stdout.String(), "the Stage is paused by StagePause prod-") ||
		!strings.Contains(paused.stdout.String(), "(reason Incident)") {
		t.Fatalf("wait --for=paused: exit %d, stdout %q", code, paused.stdout.String())
	}

	resumed := startCLI(t, env.cluster.Config, "wait", "prod", "-n", ns, "--for=resumed", "--timeout", "2m")
	resumed.says(&resumed.stderr, "the Stage is paused by StagePause prod-")
	if _, errOut, code := runCLI(t, lead, "resume", "prod", "-n", ns); code != 0 {
		t.Fatalf("resume: exit %d: %s", code, errOut)
	}
	if code := resumed.exit(); code != cli.ExitOK || resumed.stdout.String() != "stage "+ns+"/prod: the Stage is not paused\n" {
		t.Errorf("wait --for=resumed: exit %d, stdout %q", code, resumed.stdout.String())
	}
}

// status -w, off a terminal, appends a new table when something changes,
// and ends with exit 0 when interrupted.
func TestCLIStatusWatch(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	startOperator(t, ns, fastSettings())
	env.latchedStages(t, ns, "prod")
	dev := env.cluster.UserConfig(devToken)

	watch := startCLI(t, env.cluster.Config, "status", "-n", ns, "-w")
	watch.says(&watch.stdout, "STAGE")
	first := watch.stdout.String()
	checkTable(t, first, map[string][]string{"prod": {"Latched", "-", "no", "-", "-"}})

	if _, errOut, code := runCLI(t, dev, "pause", "prod", "-n", ns, "--reason", "Incident"); code != 0 {
		t.Fatalf("pause: exit %d: %s", code, errOut)
	}
	watch.says(&watch.stdout, "Incident")
	must(t, watch.cmd.Process.Signal(os.Interrupt))
	if code := watch.exit(); code != cli.ExitOK {
		t.Errorf("status -w interrupted: exit %d, want 0", code)
	}
	out := watch.stdout.String()
	if !strings.HasPrefix(out, first) {
		t.Errorf("the first table was not kept: a non-terminal gets tables appended")
	}
	tables := strings.Split(strings.TrimSpace(out), "\n\n")
	if len(tables) < 2 {
		t.Fatalf("%d tables, want the first and one after the pause:\n%s", len(tables), out)
	}
	checkTable(t, tables[len(tables)-1], map[string][]string{"prod": {"Latched", "-", "yes", "Incident"}})
}
