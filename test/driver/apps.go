package driver

import (
	"context"
	"fmt"
)

// App is one Argo CD Application of a Stage, as Kargo's argocd-update
// health check reports it.
type App struct {
	Name   string
	Health string // Argo CD health: Healthy, Progressing, Degraded, ...
	Sync   string // Argo CD sync status: Synced, OutOfSync; Synced when empty
}

// SetAppsHealth sets status.health as Kargo's health assessment does for a
// Stage whose argocd-update step updated apps: the aggregate status, one
// issue per App that is not Healthy, and status.health.output in the exact
// shape real Kargo writes (kargo-api-facts.md §7.11): an array with one
// object per health check, {"applicationStatuses": [...]}, whose entries
// have capitalised Name and Namespace and Argo CD's nested health and sync.
func (s *Stage) SetAppsHealth(ctx context.Context, aggregate string, apps ...App) error {
	return s.patchStatus(ctx, map[string]any{"health": AppsHealth(aggregate, apps...)})
}

// AppsHealth is the status.health value SetAppsHealth writes.
func AppsHealth(aggregate string, apps ...App) map[string]any {
	return ChecksHealth(aggregate, apps)
}

// SetChecksHealth sets status.health as Kargo's aggregating health checker
// does for a Stage whose last promotion left several health checks (see
// WithHealthChecks): the aggregate status, one issue per App that is not
// Healthy, and in status.health.output one entry per check that returned
// output, each listing the Apps it checked. A check that returned no output
// gets no entry, although it counts in the aggregate (kargo-api-facts.md
// §11.7): give fewer outputs than the Stage has health checks.
func (s *Stage) SetChecksHealth(ctx context.Context, aggregate string, outputs ...[]App) error {
	return s.patchStatus(ctx, map[string]any{"health": ChecksHealth(aggregate, outputs...)})
}

// ChecksHealth is the status.health value SetChecksHealth writes.
func ChecksHealth(aggregate string, outputs ...[]App) map[string]any {
	entries := make([]any, 0, len(outputs))
	var issues []any
	for _, apps := range outputs {
		statuses := make([]any, 0, len(apps))
		for _, a := range apps {
			sync := a.Sync
			if sync == "" {
				sync = "Synced"
			}
			statuses = append(statuses, map[string]any{
				"Name": a.Name, "Namespace": "argocd",
				"health": map[string]any{"status": a.Health},
				"sync":   map[string]any{"status": sync, "revision": "v2"},
				"operationState": map[string]any{"phase": "Succeeded", "finishedAt": "2026-11-30T07:58:16Z",
					"operation": map[string]any{"info": []any{map[string]any{"name": "kargo.akuity.io/promotion", "value": "promotion"}}}},
			})
			if a.Health != "Healthy" {
				issues = append(issues, fmt.Sprintf("Argo CD Application %q in namespace %q is %s", a.Name, "argocd", lower(a.Health)))
			}
		}
		entries = append(entries, map[string]any{"applicationStatuses": statuses})
	}
	h := map[string]any{
		"status": aggregate,
		"output": entries,
	}
	if len(issues) > 0 {
		h["issues"] = issues
	}
	return h
}

func lower(s string) string {
	b := []byte(s)
	if len(b) > 0 && b[0] >= 'A' && b[0] <= 'Z' {
		b[0] += 'a' - 'A'
	}
	return string(b)
}
