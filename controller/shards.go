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

// ShardKey names this operator's shard: its shard's name, "default" for
// the operator of the unlabelled Stages alone, and "" when unsharded. It
// is the operator's key in a StagePause's status.shards when sharded (see
// statusKey).
func ShardKey(shard string, defaultShard bool) string {
	switch {
	case shard != "":
		return shard
	case defaultShard:
		return "default"
	}
	return ""
}

// unshardedKey is an unsharded operator's key in status.shards: "*", as
// spec.stage names every Stage, and no label value, so no shard's name.
const unshardedKey = "*"

// statusKey is the key under which this operator counts the Stages a
// StagePause pauses in status.shards: ShardKey, or unshardedKey when
// unsharded.
func statusKey(shard string, defaultShard bool) string {
	if key := ShardKey(shard, defaultShard); key != "" {
		return key
	}
	return unshardedKey
}

// supersededKey is the key of status.shards that the operator counting
// under key removes besides its own: that of the operator it replaces,
// or "". An unsharded operator and the operator of the unlabelled Stages
// alone (--default-shard) both serve those Stages, and take the same Lease
// unless told otherwise: one is the other's successor when an installation
// moves to shards or back, so the other's count is stale. No other
// operator's key is removed by anyone but itself: while the operators of
// the shards start, an unsharded one may well be running.
func supersededKey(key string) string {
	switch key {
	case unshardedKey:
		return ShardKey("", true)
	case ShardKey("", true):
		return unshardedKey
	}
	return ""
}
