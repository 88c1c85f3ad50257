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
	statuses := make([]any, 0, len(apps))
	var issues []any
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
	h := map[string]any{
		"status": aggregate,
		"output": []any{map[string]any{"applicationStatuses": statuses}},
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
