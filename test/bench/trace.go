package main

import (
	"bufio"
	"os"
	"regexp"
	"slices"
	"time"
)

// failureSample is one timed failure of a Stage (namespace/name): when the
// bench wrote it, and when its watcher saw the StagePause.
type failureSample struct {
	stage         string
	wrote, closed time.Time
}

// pausedLine is the operator's log line of a failure's pause, made on an
// urgent sync: klog's header (month, day, time; local time), the Stage,
// when the operator's handler saw the failure, and how long it queued.
var (
	pausedLine = regexp.MustCompile(`^I(\d{4} \d{2}:\d{2}:\d{2}\.\d{6}) .*"Paused the Stage after a failure"`)
	stageValue = regexp.MustCompile(` stage="([^"]+)"`)
	seenValue  = regexp.MustCompile(` urgentSince="([^"]+)"`)
	queuedFor  = regexp.MustCompile(` queued="([^"]+)"`)
)

// sayTrace splits each failure's path to its StagePause into its steps,
// from the operator's log line of the pause: the failure's write → the
// operator's Stage handler (the watch's delivery and the cache),
// → a worker's sync (the queue), → the pause created (the sync and its
// POST), → the bench's watcher seeing the pause (the line is written after
// the create returns, so this last step can be slightly negative). Only a
// line between the sample's write and its close counts; samples without
// one (a pause made on a sync that was not urgent) are counted, not split.
func (b *bench) sayTrace(samples []failureSample) {
	made := map[string][][3]time.Time{} // by Stage: seen, synced, created
	for _, op := range b.operators {
		f, err := os.Open(op.logPath)
		if err != nil {
			say("trace: %v", err)
			return
		}
		lines := bufio.NewScanner(f)
		lines.Buffer(make([]byte, 1<<20), 1<<20)
		for lines.Scan() {
			line := lines.Text()
			m, stage, at, q := pausedLine.FindStringSubmatch(line), stageValue.FindStringSubmatch(line), seenValue.FindStringSubmatch(line), queuedFor.FindStringSubmatch(line)
			if m == nil || stage == nil || at == nil || q == nil {
				continue
			}
			created, err1 := time.ParseInLocation("0102 15:04:05.000000", m[1], time.Local)
			seen, err2 := time.Parse(time.RFC3339Nano, at[1])
			queued, err3 := time.ParseDuration(q[1])
			if err1 != nil || err2 != nil || err3 != nil {
				continue
			}
			created = created.AddDate(seen.Year(), 0, 0) // klog's header has no year
			made[stage[1]] = append(made[stage[1]], [3]time.Time{seen, seen.Add(queued), created})
		}
		_ = f.Close()
	}
	var delivered, queued, acted, back []time.Duration
	for _, s := range samples {
		i := slices.IndexFunc(made[s.stage], func(t [3]time.Time) bool { return !t[2].Before(s.wrote) && !t[2].After(s.closed.Add(time.Second)) })
		if i < 0 {
			continue
		}
		t := made[s.stage][i]
		delivered, queued = append(delivered, t[0].Sub(s.wrote)), append(queued, t[1].Sub(t[0]))
		acted, back = append(acted, t[2].Sub(t[1])), append(back, s.closed.Sub(t[2]))
	}
	if len(delivered) == 0 {
		say("trace: no failure's pause line found in the operators' logs")
		return
	}
	say("reaction, traced (%d of %d failures): the write → the operator's handler %v; queued %v; sync and POST stagepauses %v; the create's return → the watcher %v",
		len(delivered), len(samples), percentiles(delivered), percentiles(queued), percentiles(acted), percentiles(back))
}
