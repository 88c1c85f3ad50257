package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"

	"github.com/kargo-latch/kargo-latch/test/driver"
)

// operatorOf is the index in b.operators of the operator that handles the
// Stage: the one of its shard, or the only one.
func (b *bench) operatorOf(s *driver.Stage) int {
	for k, op := range b.operators {
		if op.shard == s.Shard {
			return k
		}
	}
	return 0
}

// perOperator splits Stages by the operator that handles them, in the
// order of b.operators.
func (b *bench) perOperator(stages []*driver.Stage) [][]*driver.Stage {
	out := make([][]*driver.Stage, len(b.operators))
	for _, s := range stages {
		k := b.operatorOf(s)
		out[k] = append(out[k], s)
	}
	return out
}

// stagesOf is how many Stages the operator handles.
func (b *bench) stagesOf(op *operator) int {
	n := 0
	for _, stages := range [][]*driver.Stage{b.busy, b.wide} {
		for _, s := range stages {
			if b.operators[b.operatorOf(s)] == op {
				n++
			}
		}
	}
	return n
}

// storedLine is the operator's -v=2 line for a write to a Stage, e.g.
// I1130 19:58:36.123456 1234 sync.go:281] "Stored latch record" stage="bench/stage-00061" phase="Latched" pauses=null
var storedLine = regexp.MustCompile(`"Stored latch record".* stage="([^"]+)"`)

// writtenByShards counts, from each shard's operator's own log (the
// shards share one field manager, so the Stages' managedFields cannot tell
// them apart), the Stages that two shards wrote, and those a shard wrote
// outside its own. Unsharded, it only reports how many Stages the operator
// wrote.
func (b *bench) writtenByShards(context.Context) ([]row, error) {
	shardOf := map[string]string{}
	for _, s := range b.busy {
		shardOf[busyNS+"/"+s.Name] = s.Shard
	}
	for _, s := range b.wide {
		shardOf[wideNS+"/"+s.Name] = s.Shard
	}
	writers := map[string][]string{} // Stage → the shards that wrote it
	var counts []string
	outside := 0
	for _, op := range b.operators {
		written, err := storedStages(op.logPath)
		if err != nil {
			return nil, err
		}
		counts = append(counts, fmt.Sprintf("%s wrote %d", op.name(), len(written)))
		for key := range written {
			writers[key] = append(writers[key], op.shard)
			if shardOf[key] != op.shard {
				outside++
			}
		}
	}
	if b.o.shards == 0 {
		say("the operator wrote %d Stages (its log)", len(writers))
		return nil, nil
	}
	both := 0
	for _, w := range writers {
		if len(w) > 1 {
			both++
		}
	}
	return []row{{figure: "7. Stages written by two shards", value: fmt.Sprintf("%d (%s; %d written outside their shard)", both, strings.Join(counts, ", "), outside),
		baseline: "the operators' own logs", goal: "0", met: both == 0 && outside == 0}}, nil
}

// storedStages is the set of Stages ("namespace/name") an operator's log
// says it wrote.
func storedStages(path string) (map[string]bool, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	out := map[string]bool{}
	lines := bufio.NewScanner(f)
	lines.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for lines.Scan() {
		if m := storedLine.FindStringSubmatch(lines.Text()); m != nil {
			out[m[1]] = true
		}
	}
	return out, lines.Err()
}
