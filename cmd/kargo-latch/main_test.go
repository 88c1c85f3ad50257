package main

import (
	"strings"
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
		// One Lease per shard; the default shard keeps the unsharded name.
		"shard":              {[]string{"--shard", "eu-west"}, "kargo-latch-eu-west"},
		"shard and default":  {[]string{"--shard", "eu-west", "--default-shard"}, "kargo-latch-eu-west"},
		"default shard":      {[]string{"--default-shard"}, "kargo-latch"},
		"shard, lease given": {[]string{"--shard", "eu-west", "--leader-election-id", "mine"}, "mine"},
		"dry run of a shard": {[]string{"--dry-run", "--shard", "eu-west"}, dryRunLeaseName + "-eu-west"},
		"shard with a dot":   {[]string{"--shard", "eu.west"}, "kargo-latch-eu.west"},
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
	if _, err := parseFlags([]string{"--verify-on-latch"}); err == nil {
		t.Error("--verify-on-latch was accepted without --enable-verify-on-latch")
	}
	o, err := parseFlags([]string{"--verify-on-latch", "--enable-verify-on-latch", "--verify-grace", "3s"})
	if err != nil || !o.defaults.VerifyOnLatch || !o.verifyOnLatch || o.defaults.VerifyGrace != 3*time.Second || o.defaults.VerifyPickupTimeout != 2*time.Minute {
		t.Errorf("verify-on-latch flags: %+v, %v", o, err)
	}
	if o.defaults.TerminateAfter != 30*time.Second {
		t.Errorf("verify-terminate-after %v, want 30s", o.defaults.TerminateAfter)
	}
	if _, err := parseFlags([]string{"--verify-terminate-after", "4s"}); err == nil {
		t.Error("a --verify-terminate-after under 5s was accepted")
	}
}

// --shard and --default-shard reach the options; a shard no label can
// carry, and "default" (the status key of the unlabelled Stages' operator),
// are refused at parsing, and so is a shard whose Lease name would be no
// valid object name unless the Lease is named.
func TestParseShardFlags(t *testing.T) {
	o, err := parseFlags([]string{"--shard", "eu-west", "--default-shard"})
	if err != nil {
		t.Fatal(err)
	}
	if o.shard != "eu-west" || !o.defaultShard {
		t.Errorf("shard %q, default shard %v; want eu-west, true", o.shard, o.defaultShard)
	}
	if o, err = parseFlags(nil); err != nil || o.shard != "" || o.defaultShard {
		t.Errorf("without the flags: shard %q, default shard %v, err %v; want every Stage", o.shard, o.defaultShard, err)
	}
	for name, tc := range map[string]struct {
		args []string
		want string // in the error
	}{
		"default":            {[]string{"--shard", "default"}, "--default-shard"},
		"not a label value":  {[]string{"--shard", "eu west"}, "not a valid value of the label kargo.akuity.io/shard"},
		"too long":           {[]string{"--shard", strings.Repeat("a", 64)}, "not a valid value"},
		"no Lease name":      {[]string{"--shard", "EU_West"}, "--leader-election-id"},
		"default, lease set": {[]string{"--shard", "default", "--leader-election-id", "mine"}, "--default-shard"},
		"a dry run's Lease":  {[]string{"--shard", "dry-run"}, "Lease of a --dry-run operator"},
		"a dry run's, too":   {[]string{"--shard", "dry-run-eu"}, "Lease of a --dry-run operator"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := parseFlags(tc.args)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("parseFlags(%q) = %v, want an error saying %q", tc.args, err, tc.want)
			}
		})
	}
	// A shard name valid as a label but not as a Lease name is fine with
	// the Lease named.
	if o, err := parseFlags([]string{"--shard", "EU_West", "--leader-election-id", "kargo-latch-eu-west"}); err != nil || o.shard != "EU_West" {
		t.Errorf("--shard EU_West with a Lease named: %v", err)
	}
}

// The start-up line says which Stages the operator serves.
func TestStagesServed(t *testing.T) {
	for _, tc := range []struct {
		shard        string
		defaultShard bool
		want         string
	}{
		{"", false, "all"},
		{"a", false, "labelled kargo.akuity.io/shard=a"},
		{"", true, "without the label kargo.akuity.io/shard"},
		{"a", true, "labelled kargo.akuity.io/shard=a, and those without the label"},
	} {
		if got := stagesServed(tc.shard, tc.defaultShard); got != tc.want {
			t.Errorf("stagesServed(%q, %v) = %q, want %q", tc.shard, tc.defaultShard, got, tc.want)
		}
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
