package cli

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// A wrong command line exits 2 and says what is wrong, before any cluster
// is asked (there is none here); help exits 0.
func TestUsageErrorsExit2(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"nope"}, `unknown command "nope"`},
		{[]string{"status", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"status", "a", "b"}, "status takes at most one Stage"},
		{[]string{"status", "-o", "xml"}, "unknown output"},
		{[]string{"pause", "-n", "p"}, "pause takes one STAGE, or --all"},
		{[]string{"pause", "prod", "--reason", "DB migration"}, "Did you mean --reason DBMigration"},
		{[]string{"resume"}, "resume takes one STAGE, or --all"},
		{[]string{"wait", "--for=latched"}, "wait takes one STAGE"},
		{[]string{"wait", "prod"}, "--for is required: one of latched, paused, resumed, verified"},
		{[]string{"wait", "prod", "--for=healthy"}, `unknown --for "healthy"`},
		{[]string{"wait", "prod", "--for=latched", "--timeout", "soon"}, `invalid argument "soon"`},
		{[]string{"wait", "prod", "--for=latched", "--timeout", "-1s"}, "--timeout must not be negative"},
		{[]string{"wait", "prod", "--for=latched", "--unreachable-timeout", "0"}, "--unreachable-timeout must be positive"},
		{[]string{"wait", "prod", "--for=paused", "--promotion", promo1}, "--promotion goes with --for=latched or --for=verified"},
		{[]string{"version", "extra"}, "takes no arguments"},
	} {
		var out, errOut bytes.Buffer
		code := Run(t.Context(), c.args, &out, &errOut)
		if code != ExitUsage || !strings.Contains(errOut.String(), c.want) || !strings.Contains(errOut.String(), "--help") {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 with %q and a pointer to --help", c.args, code, errOut.String(), c.want)
		}
	}
	for _, args := range [][]string{nil, {"help"}, {"--help"}, {"wait", "-h"}, {"status", "--help"}} {
		var out, errOut bytes.Buffer
		if code := Run(t.Context(), args, &out, &errOut); code != ExitOK || !strings.Contains(out.String(), "Usage:") {
			t.Errorf("%v: exit %d, stdout %q", args, code, out.String())
		}
	}
}

// wait's help states the semantics and the exit codes a pipeline relies on.
func TestWaitHelp(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	Run(t.Context(), []string{"wait", "--help"}, &out, &out)
	for _, want := range []string{"latched", "verified", "paused", "resumed", "--promotion", "kargo promote",
		"0    reached", "1    failed", "2    usage error", "3    timed out", "4    --for=resumed", "130  interrupted",
		"--unreachable-timeout", "could not be reached for --unreachable-timeout", "Kargo itself still holds"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("wait --help does not say %q", want)
		}
	}
}

// main tells the CLI from the operator by Commands: every command must be
// there, or it would start the operator.
func TestCommandsListsEveryCommand(t *testing.T) {
	t.Parallel()
	root, _ := Program{}.root(&bytes.Buffer{}, &bytes.Buffer{})
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	for _, c := range root.Commands() {
		if !slices.Contains(Commands, c.Name()) {
			t.Errorf("command %s is missing from Commands", c.Name())
		}
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		p    Program
		args []string
		want string
	}{
		{Program{Version: "v1.2.3"}, []string{"version", "--short"}, "v1.2.3\n"},
		{Program{Name: "kubectl-latch", Version: "v1.2.3"}, []string{"version"}, "kubectl-latch v1.2.3 ("},
	} {
		var out, errOut bytes.Buffer
		if code := c.p.Run(t.Context(), c.args, &out, &errOut); code != ExitOK || !strings.HasPrefix(out.String(), c.want) {
			t.Errorf("%v: exit %d, %q, want %q", c.args, code, out.String(), c.want)
		}
	}
}

// Shell completion needs no cluster for the values it knows.
func TestCompletion(t *testing.T) {
	t.Parallel()
	var out, errOut bytes.Buffer
	if code := Run(t.Context(), []string{"__complete", "wait", "prod", "--for", ""}, &out, &errOut); code != ExitOK {
		t.Fatalf("__complete: exit %d: %s", code, errOut.String())
	}
	if got := strings.Fields(out.String()); !slices.Equal(got[:4], conditions) {
		t.Errorf("completions for --for: %q", got)
	}
	out.Reset()
	if code := Run(t.Context(), []string{"completion", "bash"}, &out, &errOut); code != ExitOK || !strings.Contains(out.String(), "__start_kargo-latch") {
		t.Errorf("completion bash: exit %d, %.200q", code, out.String())
	}
	var plugin bytes.Buffer
	if code := (Program{Name: "kubectl-latch"}).Run(t.Context(), []string{"status", "--help"}, &plugin, &errOut); code != ExitOK ||
		!strings.Contains(plugin.String(), "kubectl latch status [STAGE]") {
		t.Errorf("the plugin's help does not say kubectl latch:\n%s", plugin.String())
	}
}

// Off a terminal, status -w appends a state only when it changed; on one,
// it redraws the screen.
func TestRedrawer(t *testing.T) {
	t.Parallel()
	paused := []StageStatus{{Project: "p", Stage: "prod", Phase: "Latched", Paused: true, Reason: "Incident", Pauses: []string{"inc-1"}}}
	resumed := []StageStatus{{Project: "p", Stage: "prod", Phase: "Latched"}}
	var out bytes.Buffer
	r := &redrawer{out: &out, output: "table"}
	for _, rows := range [][]StageStatus{paused, paused, resumed} {
		if err := r.draw(rows, now); err != nil {
			t.Fatal(err)
		}
	}
	want := `STAGE   PHASE     APPS   PAUSED   REASON     PAUSES   HELD   SINCE   LATCHED   ANALYSIS   VERIFIED
prod    Latched   -      yes      Incident   inc-1    -      -       -         -          -

STAGE   PHASE     APPS   PAUSED   REASON   PAUSES   HELD   SINCE   LATCHED   ANALYSIS   VERIFIED
prod    Latched   -      no       -        -        -      -       -         -          -
`
	if diff := cmp.Diff(want, trimLines(out.String())); diff != "" {
		t.Errorf("appended tables (-want +got):\n%s", diff)
	}

	out.Reset()
	r = &redrawer{out: &out, output: "yaml"}
	for _, rows := range [][]StageStatus{paused, resumed} {
		if err := r.draw(rows, now); err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Count(out.String(), "\n---\n"); got != 1 {
		t.Errorf("YAML documents: %d separators, want 1:\n%s", got, out.String())
	}

	out.Reset()
	r = &redrawer{out: &out, output: "table", tty: true}
	for _, rows := range [][]StageStatus{paused, paused} {
		if err := r.draw(rows, now); err != nil {
			t.Fatal(err)
		}
		r.stale = true // the ages are due
	}
	if got := strings.Count(out.String(), clearScreen); got != 2 {
		t.Errorf("a terminal was cleared %d times, want 2 (the ages refresh)", got)
	}
}
