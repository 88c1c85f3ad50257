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
	"slices"
	"strings"
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
	// promotions is how many terminal Promotions each busy Stage keeps.
	promotions int
	// promotionChurn is how many new Promotions per second run during the
	// churn.
	promotionChurn float64
	// createInFlight is how many busy Stages get their Promotions at once.
	createInFlight int
	// shards spreads the Stages over this many shards, one operator each;
	// 0 runs one unsharded operator.
	shards int
	// only names the phases to run after the set-up (all when empty).
	only map[string]bool
	// operator is the operator binary measured; empty for bin/kargo-latch.
	operator string
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
	flag.IntVar(&o.promotions, "promotions-per-stage", 20, "terminal Promotions per busy Stage (Kargo's garbage collector keeps 20), with the Freight they promote")
	flag.Float64Var(&o.promotionChurn, "promotion-churn", 2, "new Promotions per second during the churn, each queued, run and finished as Kargo does")
	flag.IntVar(&o.createInFlight, "create-in-flight", 16, "busy Stages given their Promotions at once: enough to keep the apiserver busy, few enough not to bury it")
	flag.StringVar(&o.operator, "operator", "", "the operator binary to measure instead of bin/kargo-latch: an older build, for figures before and after a change on the same machine")
	only := flag.String("only", "", "run only these phases after the set-up, comma-separated: reaction, project-wide, memory, shards, verify, dashboard (all when empty)")
	flag.IntVar(&o.shards, "shards", 0, "spread the Stages over shards s0..s(N-1), one operator per shard (--shard sK); 0 runs one unsharded operator")
	flag.Parse()
	var err error
	if o.only, err = onlyPhases(*only); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	if o.shards < 0 || o.promotions < 0 || o.promotionChurn < 0 || o.createInFlight < 1 {
		fmt.Fprintln(os.Stderr, "bench: -shards, -promotions-per-stage and -promotion-churn must not be negative, -create-in-flight at least 1")
		os.Exit(2)
	}
	// client-go reports requests cut short when the churn stops; the table
	// is the output.
	klog.LogToStderr(false)
	klog.SetOutput(io.Discard)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err = run(ctx, o)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// phase is one timed phase of the bench, after the set-up.
type phase struct {
	name string
	run  func(*bench, context.Context) ([]row, error)
}

// phases are the bench's phases, in the order they run.
var phases = []phase{{"reaction", (*bench).reaction}, {"project-wide", (*bench).projectWide}, {"memory", (*bench).memoryAndColdStart},
	{"shards", (*bench).writtenByShards}, {"verify", (*bench).verifyOnLatch}, {"dashboard", (*bench).dashboard}}

// onlyPhases reads -only: the phases named, comma-separated; nil for all.
func onlyPhases(list string) (map[string]bool, error) {
	var only map[string]bool
	for _, name := range strings.Split(list, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if !slices.ContainsFunc(phases, func(p phase) bool { return p.name == name }) {
			return nil, fmt.Errorf("-only: no phase %q", name)
		}
		if only == nil {
			only = map[string]bool{}
		}
		only[name] = true
	}
	return only, nil
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
	defer b.stopOperators()
	if err := b.setUp(ctx); err != nil {
		return err
	}
	var rows []row
	for _, p := range phases {
		if len(o.only) > 0 && !o.only[p.name] {
			say("%s: skipped (-only)", p.name)
			continue
		}
		r, err := p.run(b, ctx)
		if err != nil {
			return err
		}
		rows = append(rows, r...)
	}
	printTable(os.Stdout, o, b.load, rows)
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
