package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/kargo-latch/kargo-latch/kargo"
)

// plainResult is what the plain informer of plain.go measured.
type plainResult struct {
	rss                  int64
	stageSync, allSynced time.Duration
}

// memoryAndColdStart measures each operator's memory after sync and a cold
// restart against a plain, untransformed dynamic informer over the same
// objects (its Stages, their Promotions, and the Freight), in the same run.
// With shards, each shard's operator is measured against a plain informer
// of its own half, and restarted alone while the others keep running, as a
// shard's Pod restarts.
func (b *bench) memoryAndColdStart(ctx context.Context) ([]row, error) {
	b.sayEtcdSize()
	var rows []row
	for _, op := range b.operators {
		say("memory: the %s's RSS after sync", op.name())
		opRSS, err := rss(op.cmd.Process.Pid)
		if err != nil {
			return nil, err
		}
		op.saveHeapProfile(ctx)
		say("baseline: a plain dynamic informer over the same Stages, their Promotions and the Freight")
		plain, err := b.plainInformer(ctx, op.shard)
		if err != nil {
			return nil, err
		}
		say("baseline: RSS %s; the Stages synced in %v, all three kinds in %v", mb(plain.rss), plain.stageSync.Round(time.Millisecond), plain.allSynced.Round(time.Millisecond))

		stages := b.stagesOf(op)
		say("cold start: restarting the %s over %d Stages", op.name(), stages)
		op.stop()
		stagesBefore, marksBefore := b.watcher.operatorWrites()
		t0 := time.Now()
		if err := b.start(op); err != nil {
			return nil, err
		}
		for !op.ready() {
			if b.exited() == op {
				return nil, exitError(op)
			}
			if time.Since(t0) > 5*time.Minute {
				return nil, fmt.Errorf("the %s did not become ready", op.name())
			}
			time.Sleep(10 * time.Millisecond)
		}
		synced := time.Since(t0)
		time.Sleep(10 * time.Second)
		stagesAfter, marksAfter := b.watcher.operatorWrites()
		writes := stagesAfter - stagesBefore + marksAfter - marksBefore
		of := fmt.Sprintf("%d Stages", stages)
		if op.shard != "" {
			of = fmt.Sprintf("%s, its %d Stages", op.name(), stages)
		}
		rows = append(rows,
			row{figure: "3. operator RSS after sync, " + of, value: mb(opRSS), baseline: "plain informer (Stages, Promotions, Freight) " + mb(plain.rss),
				goal: "≤ 150 MB at 10k and ≤ 0.1× baseline", met: float64(opRSS) <= 0.1*float64(plain.rss) && (stages < 10000 || opRSS <= 150<<20),
				ratio: fmt.Sprintf("%.3f×", float64(opRSS)/float64(plain.rss))},
			row{figure: "4. cold start to caches synced, " + of, value: fmt.Sprintf("%v, %d writes in the next 10s", synced.Round(time.Millisecond), writes),
				baseline: fmt.Sprintf("plain Stage informer %v (with Promotions and Freight %v)", plain.stageSync.Round(time.Millisecond), plain.allSynced.Round(time.Millisecond)),
				goal:     "≤ 1.2× baseline, 0 writes",
				met:      float64(synced) <= 1.2*float64(plain.stageSync) && writes == 0, ratio: fmt.Sprintf("%.2f×", float64(synced)/float64(plain.stageSync))})
	}
	return rows, nil
}

// plainInformer runs the baseline in its own process (plain.go): over the
// Stages and Promotions of shard (all when empty) and all the Freight.
func (b *bench) plainInformer(ctx context.Context, shard string) (plainResult, error) {
	selector := ""
	if shard != "" {
		selector = kargo.ShardLabel + "=" + shard
	}
	out, err := exec.CommandContext(ctx, os.Args[0], "plain-informer", b.kubecfgAdmin(), selector, busyNS, wideNS).Output() //nolint:gosec // this very binary
	if err != nil {
		return plainResult{}, fmt.Errorf("plain informer: %w", err)
	}
	var r plainResult
	if _, err := fmt.Sscanf(strings.TrimSpace(string(out)), "%d %d %d", &r.rss, &r.stageSync, &r.allSynced); err != nil {
		return r, fmt.Errorf("plain informer said %q: %w", out, err)
	}
	return r, nil
}
