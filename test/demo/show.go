package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/cli"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

func (d *demo) phase(ctx context.Context, s *driver.Stage) latch.Phase {
	return d.record(ctx, s).Phase
}

func (d *demo) paused(ctx context.Context, s *driver.Stage) bool {
	u, err := s.Get(ctx)
	return err == nil && u.GetLabels()[api.PausedLabel] == "true"
}

func (d *demo) waitFor(ctx context.Context, what string, cond func() bool) error {
	deadline := time.Now().Add(45 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out waiting for %s", what)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nil
}

// cli runs a kargo-latch CLI command as a person and prints it like a shell.
func (d *demo) cli(who, kubeconfig string, args ...string) {
	say("   %s$ kargo-latch %s", who, strings.Join(args, " "))
	var out bytes.Buffer
	cli.Run(context.Background(), append(args, "--kubeconfig", kubeconfig), &out, &out)
	for _, line := range strings.Split(strings.TrimRight(out.String(), "\n"), "\n") {
		say("     %s", line)
	}
}

func (d *demo) showStatus() {
	d.cli("admin", d.adminKubeconfig, "status")
}

// leader is the replica that has synced the most Stages: the standby keeps
// warm caches, and exports the phase gauges too, but syncs nothing.
func (d *demo) leader() *replica {
	best, most := d.replicas[0], -1.0
	for _, r := range d.replicas {
		if n := reconciles(scrape(r.metricsURL)); n > most {
			best, most = r, n
		}
	}
	return best
}

func scrape(url string) string {
	resp, err := http.Get(url) //nolint:gosec,noctx // the local replica
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// syncs is how many Stage syncs both replicas have made together (the
// counts of their reconcile duration histograms), so that it only grows,
// whichever replica leads; -1 when a replica cannot be scraped.
func (d *demo) syncs() float64 {
	total := 0.0
	for _, r := range d.replicas {
		metrics := scrape(r.metricsURL)
		if metrics == "" {
			return -1
		}
		total += reconciles(metrics)
	}
	return total
}

// reconciles is the count of a replica's reconcile duration histogram.
func reconciles(metrics string) float64 {
	for _, line := range strings.Split(metrics, "\n") {
		if value, ok := strings.CutPrefix(line, "kargo_latch_reconcile_duration_seconds_count "); ok {
			v, _ := strconv.ParseFloat(value, 64)
			return v
		}
	}
	return 0
}

// showMetrics prints the leader's non-zero lines of the named metrics.
func (d *demo) showMetrics(names ...string) {
	r := d.leader()
	for _, line := range strings.Split(scrape(r.metricsURL), "\n") {
		for _, n := range names {
			if strings.HasPrefix(line, n+"{") || strings.HasPrefix(line, n+" ") {
				if !strings.HasSuffix(line, " 0") {
					say("   %s: %s", r.name, line)
				}
			}
		}
	}
}

// events lists the Events about a Stage in the order they happened.
func (d *demo) events(ctx context.Context, stage string) []corev1.Event {
	list, err := d.kube.CoreV1().Events(project).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + stage})
	if err != nil {
		return nil
	}
	// Timestamps have one-second precision; break ties in story order.
	rank := map[string]int{"HealthLatched": 1, "VerificationStarted": 2, "VerificationSucceeded": 3, "FreightVerified": 4,
		"StageDegraded": 5, "LatchFailed": 6, "StagePaused": 7, "PromotionDrained": 8, "StageResumed": 9}
	sort.SliceStable(list.Items, func(i, j int) bool {
		a, b := list.Items[i], list.Items[j]
		if !a.FirstTimestamp.Equal(&b.FirstTimestamp) {
			return a.FirstTimestamp.Before(&b.FirstTimestamp)
		}
		return rank[a.Reason] < rank[b.Reason]
	})
	return list.Items
}

func (d *demo) countEvents(ctx context.Context, stage, reason string) int {
	n := 0
	for _, e := range d.events(ctx, stage) {
		if e.Reason == reason {
			n += int(max(1, e.Count))
		}
	}
	return n
}

// waitForEvents waits until the Stage has an Event of each reason: most of
// kargo-latch's Events are sent asynchronously, after the record is stored.
func (d *demo) waitForEvents(ctx context.Context, stage string, reasons ...string) error {
	return d.waitFor(ctx, "Events "+strings.Join(reasons, ", "), func() bool {
		for _, r := range reasons {
			if d.countEvents(ctx, stage, r) == 0 {
				return false
			}
		}
		return true
	})
}

func (d *demo) showEvents(ctx context.Context, stage string) {
	say("   Events on Stage %s (kubectl get events -n %s):", stage, project)
	for _, e := range d.events(ctx, stage) {
		say("     %-8s %-21s %s", e.Type, e.Reason, e.Message)
	}
}

func shortError(err error) string {
	s := err.Error()
	if i := strings.Index(s, "denied request: "); i >= 0 {
		return s[i+len("denied request: "):]
	}
	return s
}
