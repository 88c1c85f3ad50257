package main

import (
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kargo-latch/kargo-latch/controller/pausing"
	"github.com/kargo-latch/kargo-latch/kargo"
)

// validateShard refuses a --shard that no Stage can carry in its label, and
// the name of the unlabelled Stages' key.
func validateShard(shard string) error {
	if shard == "" {
		return nil
	}
	if errs := validation.IsValidLabelValue(shard); len(errs) > 0 {
		return fmt.Errorf("--shard %q is not a valid value of the label %s: %s", shard, kargo.ShardLabel, strings.Join(errs, "; "))
	}
	if shard == pausing.DefaultShardKey {
		return fmt.Errorf("--shard %q is refused: %q counts the Stages without a shard label in StagePause status (use --default-shard for those)", shard, pausing.DefaultShardKey)
	}
	return nil
}

// leaseName is the Lease of an operator not told one: one Lease per shard,
// as Kargo's controllers of different shards run side by side, and a dry
// run's own (dryRunLeaseName), so that it never takes the real one's.
func leaseName(dryRun bool, shard string) string {
	name := "kargo-latch"
	if dryRun {
		name = dryRunLeaseName
	}
	if shard != "" {
		name += "-" + shard
	}
	return name
}

// stagesServed says which Stages an operator with these flags serves, for
// its start-up log line.
func stagesServed(shard string, defaultShard bool) string {
	switch {
	case shard != "" && defaultShard:
		return fmt.Sprintf("labelled %s=%s, and those without the label", kargo.ShardLabel, shard)
	case shard != "":
		return fmt.Sprintf("labelled %s=%s", kargo.ShardLabel, shard)
	case defaultShard:
		return "without the label " + kargo.ShardLabel
	}
	return "all"
}

// validateShardLease refuses a shard whose default Lease, kargo-latch-<shard>,
// would be a dry run's (kargo-latch-dry-run[-<shard>]): a shadow could take
// it. A Lease named with --leader-election-id clashes with nothing.
func validateShardLease(shard string) error {
	if shard == "dry-run" || strings.HasPrefix(shard, "dry-run-") {
		return fmt.Errorf("--shard %q makes the Lease of a --dry-run operator; name the shard otherwise, or give the Lease's name with --leader-election-id", shard)
	}
	return nil
}
