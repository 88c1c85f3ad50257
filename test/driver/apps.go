package driver

import (
	"context"
	"fmt"
	"maps"
	"slices"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// App is one Argo CD Application of a Stage, as Kargo's argocd-update
// health check reports it.
type App struct {
	Name   string
	Health string // Argo CD health: Healthy, Progressing, Degraded, ...
	Sync   string // Argo CD sync status: Synced, OutOfSync; Synced when empty
}

// WithApps makes the Stage's one promotion step an argocd-update of the
// Argo CD Applications names, instead of the App named as the Stage: each
// successful Promotion then leaves one health check naming them, whose
// output SetAppsHealth writes.
func WithApps(names ...string) StageOption {
	return func(stage *unstructured.Unstructured) {
		apps := make([]any, 0, len(names))
		for _, name := range names {
			apps = append(apps, map[string]any{"name": name})
		}
		steps := []any{map[string]any{"uses": "argocd-update", "config": map[string]any{"apps": apps}}}
		_ = unstructured.SetNestedSlice(stage.Object, steps, "spec", "promotionTemplate", "spec", "steps")
	}
}

// WithHealthChecks gives the Stage n argocd-update promotion steps, each
// updating an App of its own, instead of one: each successful Promotion then
// leaves n health checks for Kargo to run (lastPromotion.status.healthChecks).
func WithHealthChecks(n int) StageOption {
	return func(stage *unstructured.Unstructured) {
		steps := make([]any, 0, n)
		for i := range n {
			steps = append(steps, map[string]any{"uses": "argocd-update", "as": fmt.Sprintf("update-%d", i+1),
				"config": map[string]any{"apps": []any{map[string]any{"name": fmt.Sprintf("%s-%d", stage.GetName(), i+1)}}}})
		}
		_ = unstructured.SetNestedSlice(stage.Object, steps, "spec", "promotionTemplate", "spec", "steps")
	}
}

// promotionTemplateOf is the Stage's promotion template, the steps Kargo
// copies into each of its Promotions.
func promotionTemplateOf(stage *unstructured.Unstructured) []any {
	steps, _, _ := unstructured.NestedSlice(stage.Object, "spec", "promotionTemplate", "spec", "steps")
	return steps
}

// healthChecksOf is what a successful Promotion of stage leaves in
// status.healthChecks: one check per argocd-update step, naming the step's
// Apps, as Kargo's argocd-update step returns it.
func healthChecksOf(stage *unstructured.Unstructured) []any {
	var checks []any
	for _, step := range promotionTemplateOf(stage) {
		step, _ := step.(map[string]any)
		if step["uses"] != "argocd-update" {
			continue
		}
		apps, _, _ := unstructured.NestedSlice(step, "config", "apps")
		for _, a := range apps {
			if a, ok := a.(map[string]any); ok {
				a["namespace"] = "argocd"
			}
		}
		checks = append(checks, map[string]any{"uses": "argocd-update", "config": map[string]any{"apps": apps}})
	}
	return checks
}

// successHealthChecks is what a successful Promotion of freight to the
// Stage leaves in status.healthChecks. A busy Stage's names its BusyApps
// Apps with the revision to sync to, as the Promotions WriteBusyStatus and
// CreatePromotionHistory record do.
func (s *Stage) successHealthChecks(freight string) []any {
	s.mu.Lock()
	busy := s.busy != nil
	s.mu.Unlock()
	if busy {
		return []any{map[string]any{"uses": "argocd-update", "config": s.argoCDHealthInput(freight)}}
	}
	return runtime.DeepCopyJSONValue(s.healthChecks).([]any)
}

// promotionTemplate is the steps Kargo copies into a Promotion of the
// Stage: its template's.
func (s *Stage) promotionTemplate() []any {
	return runtime.DeepCopyJSONValue(s.steps).([]any)
}

// SetAppsHealth sets status.health as Kargo's health assessment does for a
// Stage whose every health check reports: the aggregate status, one issue
// per App that is not Healthy, and status.health.output in the exact shape
// real Kargo writes (kargo-api-facts.md §7.11): an array with one object per
// health check, {"applicationStatuses": [...]}, listing the Apps the check
// names (CheckedApps) with capitalised Name and Namespace and Argo CD's
// nested health and sync. apps must be exactly the Apps the Stage's checks
// name (see WithApps); anything else is an error: Kargo cannot write it.
func (s *Stage) SetAppsHealth(ctx context.Context, aggregate string, apps ...App) error {
	outputs, err := s.checkOutputs(apps)
	if err != nil {
		return err
	}
	if len(outputs) != len(s.healthChecks) {
		return fmt.Errorf("stage %s/%s: Apps %v given, its health checks name %v", s.Namespace, s.Name, appNames(apps), s.CheckedApps())
	}
	return s.patchStatus(ctx, map[string]any{"health": ChecksHealth(aggregate, outputs...)})
}

// AppsHealth is the status.health value of one health check reporting apps.
func AppsHealth(aggregate string, apps ...App) map[string]any {
	return ChecksHealth(aggregate, apps)
}

// SetChecksHealth sets status.health as Kargo's aggregating health checker
// does for a Stage whose last promotion left several health checks (see
// WithHealthChecks): the aggregate status, one issue per App that is not
// Healthy, and in status.health.output one entry per check that returned
// output, listing the Apps the check names (CheckedApps), in its order. A
// check returns output here when apps gives every App it names, and none
// when apps gives none of them: it then gets no entry, although it counts in
// the aggregate (kargo-api-facts.md §11.7). An App of no check, or a check
// given only some of its Apps, is an error: Kargo cannot write that.
func (s *Stage) SetChecksHealth(ctx context.Context, aggregate string, apps ...App) error {
	outputs, err := s.checkOutputs(apps)
	if err != nil {
		return err
	}
	return s.patchStatus(ctx, map[string]any{"health": ChecksHealth(aggregate, outputs...)})
}

// checkOutputs sorts apps into the outputs of the health checks naming
// them, in the checks' order; a check given none of its Apps has none.
func (s *Stage) checkOutputs(apps []App) ([][]App, error) {
	byName := make(map[string]App, len(apps))
	for _, a := range apps {
		byName[a.Name] = a
	}
	var outputs [][]App
	for i, names := range s.CheckedApps() {
		var output []App
		for _, name := range names {
			if a, ok := byName[name]; ok {
				output = append(output, a)
				delete(byName, name)
			}
		}
		switch len(output) {
		case 0:
		case len(names):
			outputs = append(outputs, output)
		default:
			return nil, fmt.Errorf("stage %s/%s: health check %d names Apps %v, given only %d of them", s.Namespace, s.Name, i+1, names, len(output))
		}
	}
	if len(byName) > 0 {
		return nil, fmt.Errorf("stage %s/%s: Apps %v are in none of its health checks %v", s.Namespace, s.Name, slices.Sorted(maps.Keys(byName)), s.CheckedApps())
	}
	return outputs, nil
}

func appNames(apps []App) []string {
	names := make([]string, 0, len(apps))
	for _, a := range apps {
		names = append(names, a.Name)
	}
	return names
}

// CheckedApps names the Apps of each health check a successful Promotion of
// the Stage leaves (lastPromotion.status.healthChecks), in order: one check
// per argocd-update step, naming the step's Apps.
func (s *Stage) CheckedApps() [][]string {
	checked := make([][]string, 0, len(s.healthChecks))
	for _, check := range s.healthChecks {
		check, _ := check.(map[string]any)
		apps, _, _ := unstructured.NestedSlice(check, "config", "apps")
		names := make([]string, 0, len(apps))
		for _, a := range apps {
			a, _ := a.(map[string]any)
			if name, _, _ := unstructured.NestedString(a, "name"); name != "" {
				names = append(names, name)
			}
		}
		checked = append(checked, names)
	}
	return checked
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
