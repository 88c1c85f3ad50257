package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"k8s.io/client-go/rest"

	"github.com/kargo-latch/kargo-latch/cli"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// runCLI runs the real binary as a person with cfg's credentials.
func runCLI(t *testing.T, cfg *rest.Config, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(buildOperator(t), append(args, "--kubeconfig", writeKubeconfig(t, cfg))...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func TestCLI(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	startOperator(t, ns, fastSettings())
	stages := env.latchedStages(t, ns, "latched", "degraded", "paused")
	degraded, pausedStage := stages[1], stages[2]
	must(t, degraded.SetHealth(ctx, kargo.HealthUnhealthy))
	waitPhase(t, degraded, latch.PhaseDegraded)
	admin, dev, lead := env.cluster.Config, env.cluster.UserConfig(devToken), env.cluster.UserConfig(leadToken)

	out, errOut, code := runCLI(t, dev, "pause", "paused", "-n", ns, "--reason", "Incident", "--message", "INC-1")
	if code != 0 || !strings.Contains(out, "Stage paused is paused (reason Incident)") {
		t.Fatalf("dev pausing: exit %d, %q %q", code, out, errOut)
	}
	waitPaused(t, pausedStage, true)

	out, errOut, code = runCLI(t, admin, "status", "-n", ns)
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errOut)
	}
	t.Logf("kargo-latch status -n %s:\n%s", ns, out)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if got := strings.Fields(lines[0]); strings.Join(got, " ") != "STAGE PHASE PAUSED REASON PAUSES SINCE LATCHED" {
		t.Errorf("header %q", lines[0])
	}
	wantRows := map[string][]string{
		"degraded": {"Degraded", "no", "-", "-"},
		"latched":  {"Latched", "no", "-", "-"},
		"paused":   {"Latched", "yes", "Incident"},
	}
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		want, ok := wantRows[f[0]]
		if !ok {
			t.Errorf("unexpected row %q", l)
			continue
		}
		if strings.Join(f[1:1+len(want)], " ") != strings.Join(want, " ") {
			t.Errorf("row %q, want %v", l, want)
		}
		delete(wantRows, f[0])
	}
	if len(wantRows) != 0 {
		t.Errorf("missing rows %v", wantRows)
	}

	out, _, code = runCLI(t, admin, "status", "paused", "-n", ns, "-o", "json")
	var rows []cli.StageStatus
	if code != 0 || json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 || !rows[0].Paused || rows[0].Record == nil {
		t.Errorf("status -o json: exit %d, %q", code, out)
	}
	if out, _, code = runCLI(t, admin, "status", "-A", "-o", "yaml"); code != 0 || !strings.Contains(out, "project: "+ns) {
		t.Errorf("status -A -o yaml: exit %d", code)
	}

	// Error cases: clear messages and a non-zero exit.
	for _, c := range []struct {
		cfg  *rest.Config
		args []string
		want string
	}{
		{dev, []string{"resume", "paused", "-n", ns}, `needs "delete" on stagepauses.kargo-latch.io`},
		{admin, []string{"pause", "nope", "-n", ns}, "no such Stage nope"},
		{admin, []string{"status", "nope", "-n", ns}, "no such Stage nope"},
		{admin, []string{"resume", "latched", "-n", ns}, "stage latched in project " + ns + " is not paused"},
		{admin, []string{"resume", "--all", "-n", ns}, "has no project-wide pause"},
		{admin, []string{"pause", "-n", ns}, "pause takes one STAGE, or --all"},
		{admin, []string{"status", "-n", ns, "-o", "xml"}, "unknown output"},
	} {
		_, errOut, code := runCLI(t, c.cfg, c.args...)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want non-zero and %q", c.args, code, errOut, c.want)
		}
	}

	// A project-wide pause: resuming a Stage says it is still paused.
	if _, errOut, code := runCLI(t, dev, "pause", "--all", "-n", ns); code != 0 {
		t.Fatalf("pause --all: %s", errOut)
	}
	out, errOut, code = runCLI(t, lead, "resume", "paused", "-n", ns)
	if code != 0 || !strings.Contains(out, "still paused by the project-wide StagePause") {
		t.Errorf("resume under a project-wide pause: exit %d, %q %q", code, out, errOut)
	}
	if _, errOut, code := runCLI(t, lead, "resume", "--all", "-n", ns); code != 0 {
		t.Errorf("resume --all: %s", errOut)
	}
	waitPaused(t, pausedStage, false)
}
