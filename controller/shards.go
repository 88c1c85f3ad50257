package controller

import (
	"github.com/kargo-latch/kargo-latch/kargo"
)

// Shards follow Kargo's: an operator started with Config.Shard watches only
// the Stages (and Promotions) labelled kargo.ShardLabel=Shard, one started
// with Config.DefaultShard those without the label, one with both the two
// together, and one with neither every Stage. The selection is made by the
// API server (label selectors on the lists and watches), so a shard's
// operator neither receives nor caches the others' objects.

// shardSelectors are the label selectors of the Stages this operator
// serves, one list and watch each; [""] (everything) when unsharded.
func shardSelectors(shard string, defaultShard bool) []string {
	var out []string
	if shard != "" {
		out = append(out, kargo.ShardLabel+"="+shard)
	}
	if defaultShard {
		out = append(out, "!"+kargo.ShardLabel)
	}
	if len(out) == 0 {
		return []string{""}
	}
	return out
}
