package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kargo-latch/kargo-latch/cli"
	"github.com/kargo-latch/kargo-latch/controller"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

func (d *demo) phase(ctx context.Context, s *driver.Stage) latch.Phase {
	u, err := s.Get(ctx)
	if err != nil {
		return ""
	}
	r, err := latch.Decode(u.GetAnnotations()[controller.StateAnnotation])
	if err != nil {
		return ""
	}
	return r.Phase
}

func (d *demo) paused(ctx context.Context, s *driver.Stage) bool {
	u, err := s.Get(ctx)
	return err == nil && u.GetLabels()[controller.PausedLabel] == "true"
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

// leader is the replica whose metrics show Stage syncs.
func (d *demo) leader() *replica {
	for _, r := range d.replicas {
		if strings.Contains(scrape(r.metricsURL), `kargo_latch_stage_phase{`) {
			return r
		}
	}
	return d.replicas[0]
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

func (d *demo) showEvents(ctx context.Context, stage string) {
	list, err := d.kube.CoreV1().Events(project).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + stage})
	if err != nil {
		return
	}
	// Timestamps have one-second precision; break ties in story order.
	rank := map[string]int{"HealthLatched": 1, "StageDegraded": 2, "LatchFailed": 3, "StagePaused": 4, "PromotionDrained": 5, "StageResumed": 6}
	sort.SliceStable(list.Items, func(i, j int) bool {
		a, b := list.Items[i], list.Items[j]
		if !a.FirstTimestamp.Equal(&b.FirstTimestamp) {
			return a.FirstTimestamp.Before(&b.FirstTimestamp)
		}
		return rank[a.Reason] < rank[b.Reason]
	})
	say("   Events on Stage %s (kubectl get events -n %s):", stage, project)
	for _, e := range list.Items {
		say("     %-8s %-15s %s", e.Type, e.Reason, e.Message)
	}
}

func shortError(err error) string {
	s := err.Error()
	if i := strings.Index(s, "denied request: "); i >= 0 {
		return s[i+len("denied request: "):]
	}
	return s
}
