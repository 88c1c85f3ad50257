package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// The operator's defaults (cmd/kargo-latch), which the bench runs it with.
const (
	operatorWorkers = 8
	operatorQPS     = 200
	operatorBurst   = 500
)

// projectWide times one project-wide pause over the small Stages, against
// the same Stages annotated with plain PATCHes by a client with the
// operator's default workers, QPS and burst, in the same run. With shards,
// the Stages span every shard, and the baseline has one such client per
// shard, each patching its shard's Stages, as the shards' operators label
// them.
func (b *bench) projectWide(ctx context.Context) ([]row, error) {
	clients := len(b.operators)
	say("baseline: %d client(s) of %d workers PATCH an annotation on %d Stages at QPS %d, burst %d each, until a watcher sees them all",
		clients, operatorWorkers, len(b.wide), operatorQPS, operatorBurst)
	plain, err := b.plainPatches(ctx)
	if err != nil {
		return nil, err
	}
	say("baseline: %v", plain.Round(time.Millisecond))
	time.Sleep(2 * time.Second) // the operator's syncs of the annotated Stages pass

	say("project-wide pause of %d Stages", len(b.wide))
	p := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.GroupVersion.String(), "kind": "StagePause",
		"metadata": map[string]any{"name": "big-red-button", "namespace": wideNS},
		"spec":     map[string]any{"stage": "*", "reason": "ProjectPause"},
	}}
	server, operators := b.viewServer(ctx), b.viewOperators(ctx)
	t0 := time.Now()
	if _, err := b.dyn.Resource(v1alpha1.StagePausesResource).Namespace(wideNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if err := b.watcher.waitFor(ctx, time.Minute, func(w *watcher) bool { return w.paused[wideNS] == len(b.wide) }); err != nil {
		return nil, err
	}
	took := time.Since(t0)
	b.watcher.mu.Lock()
	var labeled []time.Duration
	for _, s := range b.wide {
		labeled = append(labeled, b.watcher.pauseAt[wideNS+"/"+s.Name].Sub(t0))
	}
	b.watcher.mu.Unlock()
	say("project-wide pause: Stages seen labeled after %v", percentiles(labeled))
	b.sayServerSide(ctx, "project-wide pause", server, "PATCH stages", "POST events")
	b.sayOperatorSide(ctx, "project-wide pause", operators)
	b.sayPauseStatus(ctx, p.GetName())
	ratio := float64(took) / float64(plain)
	figure := fmt.Sprintf("2. project-wide pause, %d Stages all labeled", len(b.wide))
	baseline := fmt.Sprintf("%d plain PATCHes, %d workers, QPS %d/burst %d: %v", len(b.wide), operatorWorkers, operatorQPS, operatorBurst, plain.Round(time.Millisecond))
	if clients > 1 {
		figure = fmt.Sprintf("2. project-wide pause, %d Stages over %d shards all labeled", len(b.wide), clients)
		baseline = fmt.Sprintf("%d plain PATCHes, %d clients (one per shard) of %d workers, QPS %d/burst %d each: %v",
			len(b.wide), clients, operatorWorkers, operatorQPS, operatorBurst, plain.Round(time.Millisecond))
	}
	return []row{{figure: figure, value: took.Round(time.Millisecond).String(), baseline: baseline,
		goal: "≤ 1.5× baseline", met: ratio <= 1.5, ratio: fmt.Sprintf("%.2f×", ratio)}}, nil
}

// plainPatches annotates every small Stage with plain merge PATCHes, from
// operatorWorkers goroutines sharing one client limited as the operator's
// is, one client per operator each patching that operator's Stages, all at
// once, and returns the time until the watcher has seen them all.
func (b *bench) plainPatches(ctx context.Context) (time.Duration, error) {
	const value = "plain"
	groups := b.perOperator(b.wide)
	errs := make(chan error, len(groups))
	var wg sync.WaitGroup
	t0 := time.Now()
	for _, stages := range groups {
		wg.Go(func() { errs <- patchAll(ctx, b.c.Config, stages, value) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return 0, err
		}
	}
	var last time.Time
	for _, s := range b.wide {
		seen, err := b.watcher.waitPing(ctx, wideNS, s.Name, value)
		if err != nil {
			return 0, err
		}
		if seen.After(last) {
			last = seen
		}
	}
	return last.Sub(t0), nil
}

// patchAll annotates the Stages with bench/ping=value from operatorWorkers
// goroutines sharing one client limited as the operator's is.
func patchAll(ctx context.Context, base *rest.Config, stages []*driver.Stage, value string) error {
	cfg := rest.CopyConfig(base)
	cfg.QPS, cfg.Burst = operatorQPS, operatorBurst
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	work := make(chan string)
	errs := make(chan error, operatorWorkers)
	for range operatorWorkers {
		go func() {
			var first error
			for name := range work {
				patch := fmt.Sprintf(`{"metadata":{"annotations":{"bench/ping":%q}}}`, value)
				if _, err := client.Resource(kargo.StagesResource).Namespace(wideNS).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil && first == nil {
					first = err
				}
			}
			errs <- first
		}()
	}
	for _, s := range stages {
		work <- s.Name
	}
	close(work)
	var first error
	for range operatorWorkers {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// sayPauseStatus reports the project-wide pause's status once it counts
// every Stage (at most 30 s): status.stages and, with shards, what each
// shard's operator counts in status.shards. It only reports.
func (b *bench) sayPauseStatus(ctx context.Context, name string) {
	client := b.dyn.Resource(v1alpha1.StagePausesResource).Namespace(wideNS)
	deadline := time.Now().Add(30 * time.Second)
	for {
		u, err := client.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			say("project-wide pause: cannot read its status: %v", err)
			return
		}
		stages, _, _ := unstructured.NestedInt64(u.Object, "status", "stages")
		shards, _, _ := unstructured.NestedMap(u.Object, "status", "shards")
		if int(stages) == len(b.wide) || time.Now().After(deadline) || ctx.Err() != nil {
			var counts []string
			for _, k := range slices.Sorted(maps.Keys(shards)) {
				counts = append(counts, fmt.Sprintf("%s=%v", k, shards[k]))
			}
			say("project-wide pause: its status counts %d Stages of %d; status.shards {%s}", stages, len(b.wide), strings.Join(counts, ", "))
			return
		}
		select { // polling the pause's status: the watcher does not watch StagePauses
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
		}
	}
}
