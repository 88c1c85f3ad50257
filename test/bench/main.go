// Command bench measures kargo-latch against the physical limit of the same
// test apiserver, each figure next to its baseline taken in the same run,
// and prints a table. Run it with `make bench` (BENCH_STAGES=10000 for the
// issue's full scale). See docs/performance.md.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"time"

	"k8s.io/klog/v2"

	"github.com/kargo-latch/kargo-latch/test/cluster"
)

type options struct {
	stages    int // busy Stages for latency, memory, cold start, steady state
	wide      int // Stages under one project-wide pause
	samples   int // reaction samples
	churn     int // status writes per second of background churn
	inFlight  int // churn writes in flight at most
	steadyFor time.Duration
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == "plain-informer" {
		os.Exit(plainInformer(os.Args[2:]))
	}
	var o options
	flag.IntVar(&o.stages, "stages", 1000, "busy Stages (about 64 KB of status each)")
	flag.IntVar(&o.wide, "wide", 500, "Stages under the project-wide pause")
	flag.IntVar(&o.samples, "samples", 60, "failures timed for the reaction latency")
	flag.IntVar(&o.churn, "churn", 100, "background status writes per second")
	flag.IntVar(&o.inFlight, "churn-in-flight", 4, "background status writes in flight at most: more only queue in a saturated apiserver and starve its watch cache")
	flag.DurationVar(&o.steadyFor, "steady", 30*time.Second, "how long to watch the steady state")
	flag.Parse()
	// client-go reports requests cut short when the churn stops; the table
	// is the output.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	say("starting the test cluster")
	c, err := cluster.Start(ctx, cluster.Options{})
	if err != nil {
		return err
	}
	defer c.Stop()
	// The watcher stops before the cluster does, so that it does not take
	// the cluster's end for a watch the apiserver closed.
	ctx, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	b, err := newBench(ctx, c, o)
	if err != nil {
		return err
	}
	defer b.stopOperator()
	var rows []row
	steps := []func(context.Context) ([]row, error){b.setUp, b.reaction, b.projectWide, b.memoryAndColdStart}
	for _, step := range steps {
		r, err := step(ctx)
		if err != nil {
			return err
		}
		rows = append(rows, r...)
	}
	printTable(os.Stdout, o, rows)
	if n := b.watcher.restarted(); n > 0 {
		fmt.Printf("\nThe apiserver closed the watcher's watches %d times during this run (see above): latencies seen through them, baselines included, are disturbed.\n", n)
	}
	return nil
}

var start = time.Now()

func say(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "[%6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
}

func binPath(c *cluster.Cluster, name string) string { return filepath.Join(c.Root, "bin", name) }
