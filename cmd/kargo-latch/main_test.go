package main

import (
	"testing"
	"time"
)

// A dry-run operator shadowing the real one takes its own Lease, unless
// told otherwise; the window for failures of record-less Stages has a
// default and refuses a negative value.
func TestParseOptions(t *testing.T) {
	for name, tc := range map[string]struct {
		args  []string
		lease string
	}{
		"real":                 {nil, "kargo-latch"},
		"dry run":              {[]string{"--dry-run"}, dryRunLeaseName},
		"dry run, lease given": {[]string{"--dry-run", "--leader-election-id", "shadow"}, "shadow"},
	} {
		t.Run(name, func(t *testing.T) {
			o, err := parseFlags(tc.args)
			if err != nil {
				t.Fatal(err)
			}
			if o.leaderID != tc.lease {
				t.Errorf("Lease %q, want %q", o.leaderID, tc.lease)
			}
			if o.defaults.NewFailureWindow != 15*time.Minute {
				t.Errorf("new-failure-window %v, want 15m", o.defaults.NewFailureWindow)
			}
		})
	}
	if _, err := parseFlags([]string{"--new-failure-window", "-1m"}); err == nil {
		t.Error("a negative --new-failure-window was accepted")
	}
}

// The binary is the CLI when named as the kubectl plugin or called with a
// CLI command (shell completion included); the operator otherwise.
func TestIsCLI(t *testing.T) {
	for _, c := range []struct {
		args []string
		cli  bool
		name string
	}{
		{[]string{"/usr/local/bin/kargo-latch", "wait", "prod"}, true, "kargo-latch"},
		{[]string{"kargo-latch", "version"}, true, "kargo-latch"},
		{[]string{"kargo-latch", "__complete", "status", ""}, true, "kargo-latch"},
		{[]string{"/home/me/.krew/bin/kubectl-latch"}, true, "kubectl-latch"},
		{[]string{"kargo-latch", "--leader-elect"}, false, "kargo-latch"},
		{[]string{"kargo-latch"}, false, "kargo-latch"},
	} {
		if got := isCLI(c.args); got != c.cli {
			t.Errorf("isCLI(%q) = %v, want %v", c.args, got, c.cli)
		}
		if got := cliName(c.args[0]); got != c.name {
			t.Errorf("cliName(%q) = %q, want %q", c.args[0], got, c.name)
		}
	}
}
