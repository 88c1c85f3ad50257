package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/cli"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
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

// checkTable checks the header of a `status` table, and that its rows are
// exactly the Stages of want, each starting with the cells after the Stage
// name that want gives, and ending with VERIFIED "-".
func checkTable(t *testing.T, out string, want map[string][]string) {
	t.Helper()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if got := strings.Join(strings.Fields(lines[0]), " "); got != "STAGE PHASE APPS PAUSED REASON PAUSES HELD SINCE LATCHED ANALYSIS VERIFIED" {
		t.Errorf("header %q", lines[0])
	}
	missing := maps.Clone(want)
	for _, l := range lines[1:] {
		f := strings.Fields(l)
		cells, ok := missing[f[0]]
		if !ok {
			t.Errorf("unexpected row %q", l)
			continue
		}
		if got := f[1:min(len(f), 1+len(cells))]; !slices.Equal(got, cells) || f[len(f)-1] != "-" {
			t.Errorf("row %q, want %v ... -", l, cells)
		}
		delete(missing, f[0])
	}
	if len(missing) != 0 {
		t.Errorf("missing rows %v", missing)
	}
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

	// Two Apps flapping out of phase: the first has been Healthy, so the
	// per-Application latch is half way.
	apps := env.createStage(t, ns, "apps", nil, driver.WithApps("front", "back"))
	_, err := apps.StartPromotion(ctx)
	must(t, err)
	_, err = apps.FinishPromotion(ctx, "Succeeded")
	must(t, err)
	must(t, apps.SetAppsHealth(ctx, kargo.HealthProgressing,
		driver.App{Name: "front", Health: kargo.HealthHealthy}, driver.App{Name: "back", Health: kargo.HealthProgressing}))
	waitFor(t, "front to be seen Healthy", func() bool {
		r := stageRecord(t, apps)
		return r.Phase == latch.PhasePromoted && len(r.AppsHealthy) == 1
	})

	out, errOut, code = runCLI(t, admin, "status", "-n", ns)
	if code != 0 {
		t.Fatalf("status: exit %d: %s", code, errOut)
	}
	t.Logf("kargo-latch status -n %s:\n%s", ns, out)
	checkTable(t, out, map[string][]string{
		"apps":     {"Promoted", "1/2", "no", "-", "-"},
		"degraded": {"Degraded", "-", "no", "-", "-"},
		"latched":  {"Latched", "-", "no", "-", "-"},
		"paused":   {"Latched", "-", "yes", "Incident"},
	})

	// The second App Healthy, while the first is not any more: the cycle
	// latches. Nobody asked to mark the Freight verified.
	must(t, apps.SetAppsHealth(ctx, kargo.HealthProgressing,
		driver.App{Name: "front", Health: kargo.HealthProgressing}, driver.App{Name: "back", Health: kargo.HealthHealthy}))
	rec := waitPhase(t, apps, latch.PhaseLatched)
	out, errOut, code = runCLI(t, admin, "status", "apps", "-n", ns)
	if code != 0 {
		t.Fatalf("status apps: exit %d: %s", code, errOut)
	}
	t.Logf("kargo-latch status apps -n %s:\n%s", ns, out)
	checkTable(t, out, map[string][]string{"apps": {"Latched", "2/2", "no", "-", "-"}})

	out, _, code = runCLI(t, admin, "status", "apps", "-n", ns, "-o", "yaml")
	var rows []cli.StageStatus
	if code != 0 || yaml.Unmarshal([]byte(out), &rows) != nil || len(rows) != 1 {
		t.Fatalf("status apps -o yaml: exit %d, %q", code, out)
	}
	t.Logf("kargo-latch status apps -n %s -o yaml:\n%s", ns, out)
	front, back := rec.AppsHealthy["argocd/front"], rec.AppsHealthy["argocd/back"]
	wantApps := []cli.AppStatus{
		{Name: "front", Namespace: "argocd", Health: kargo.HealthProgressing, Sync: "Synced", SeenHealthyAt: &front},
		{Name: "back", Namespace: "argocd", Health: kargo.HealthHealthy, Sync: "Synced", SeenHealthyAt: &back},
	}
	if diff := cmp.Diff(wantApps, rows[0].Apps); diff != "" {
		t.Errorf("status -o yaml apps (-want +got):\n%s", diff)
	}
	if !front.Before(back) || rows[0].LatchedAt == nil || !rows[0].LatchedAt.Equal(back) || rows[0].MarkedVerified {
		t.Errorf("status -o yaml: front seen at %v, back at %v, latchedAt %v, markedVerified %v; want back after front, the latch then, and no mark",
			front, back, rows[0].LatchedAt, rows[0].MarkedVerified)
	}

	out, _, code = runCLI(t, admin, "status", "paused", "-n", ns, "-o", "json")
	rows = nil
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

// TestCLIPauseReasonIsChecked: `pause --reason "DB migration"` (free text
// where a CamelCase word belongs; the reason becomes a label value) is
// refused with a message that says what to type instead, before anything
// is written; the suggested command pauses, with the free text kept in the
// message.
func TestCLIPauseReasonIsChecked(t *testing.T) {
	t.Parallel()
	ns := env.newProject(t)
	env.createStage(t, ns, "prod", nil)
	dev := env.cluster.UserConfig(devToken)

	_, errOut, code := runCLI(t, dev, "pause", "prod", "-n", ns, "--reason", "DB migration")
	if code == 0 || !strings.Contains(errOut, `--reason "DB migration" is not a reason`) ||
		!strings.Contains(errOut, `Did you mean --reason DBMigration --message "DB migration"?`) {
		t.Errorf("pause --reason \"DB migration\": exit %d, stderr %q; want a refusal that suggests DBMigration", code, errOut)
	}
	if strings.Contains(errOut, "Invalid value") {
		t.Errorf("the API server's raw error reached the person: %q", errOut)
	}
	if n := len(env.listPauses(t, ns)); n != 0 {
		t.Errorf("the refused pause left %d StagePauses", n)
	}

	out, errOut, code := runCLI(t, dev, "pause", "prod", "-n", ns, "--reason", "DBMigration", "--message", "DB migration")
	if code != 0 || !strings.Contains(out, "Stage prod is paused (reason DBMigration)") {
		t.Fatalf("the suggested command: exit %d, %q %q", code, out, errOut)
	}
	pauses := env.listPauses(t, ns)
	if len(pauses) != 1 {
		t.Fatalf("%d StagePauses, want 1", len(pauses))
	}
	p := pauses[0]
	reason, _, _ := unstructured.NestedString(p.Object, "spec", "reason")
	message, _, _ := unstructured.NestedString(p.Object, "spec", "message")
	if reason != "DBMigration" || message != "DB migration" || p.GetLabels()[v1alpha1.ReasonLabel] != "DBMigration" {
		t.Errorf("StagePause reason %q, message %q, labels %v", reason, message, p.GetLabels())
	}
}
