package driver

import (
	"context"
	"crypto/sha1" //nolint:gosec // Kargo derives Freight collection IDs with SHA-1
	"encoding/hex"
	"fmt"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kargo-latch/kargo-latch/kargo"
)

// BusyApps is how many Argo CD Applications a busy Stage deploys.
const BusyApps = 40

// WithBusyApps gives the Stage a busy Stage's promotion template, a common
// GitOps one (promotionshape.go) whose argocd-update step updates its
// BusyApps Applications (BusyAppName): the Stage WriteBusyStatus needs.
func WithBusyApps() StageOption {
	return func(stage *unstructured.Unstructured) {
		steps := (&Stage{Name: stage.GetName()}).promotionSteps()
		_ = unstructured.SetNestedSlice(stage.Object, steps, "spec", "promotionTemplate", "spec", "steps")
	}
}

// WriteBusyStatus writes the status of a Stage that has been in service for
// a while, as Kargo keeps it: a Succeeded lastPromotion (with the health
// check it left), 10 freightHistory entries with 10 verification records
// each, and the argocd-update health output of BusyApps Applications in
// Kargo's exact shape, about 64 KB of JSON in all. health is the Stage's and every App's current health. The current
// Freight exists, as a Warehouse made it, and is verified in the Stage, as
// Kargo marks it once a Healthy pass has seen its verification succeed.
// The Stage must have been created WithBusyApps, whose Apps its health
// check names: Kargo could not report them otherwise.
func (s *Stage) WriteBusyStatus(ctx context.Context, health string) error {
	busyApps := make([]string, 0, BusyApps)
	for i := range BusyApps {
		busyApps = append(busyApps, s.BusyAppName(i))
	}
	if checked := s.CheckedApps(); len(checked) != 1 || !slices.Equal(checked[0], busyApps) {
		return fmt.Errorf("stage %s/%s: its health checks name Apps %v, not a busy Stage's (create it WithBusyApps)", s.Namespace, s.Name, checked)
	}
	now := s.k.clock().UTC()
	var history []any
	var newest string
	past := &busyPast{}
	for i := range 10 {
		freight := newFreightName()
		if i == 0 {
			newest = freight
		}
		past.freight = append(past.freight, freight)
		sum := sha1.Sum([]byte(freight)) //nolint:gosec // Kargo's own ID scheme
		var verifications []any
		for j := range 10 {
			at := now.Add(-time.Duration(i*10+j) * time.Hour).Format(time.RFC3339)
			verifications = append(verifications, map[string]any{
				"id": newUUID(), "actor": "controller:kargo", "phase": "Successful",
				"startTime": at, "finishTime": at, "message": "",
				"analysisRun": map[string]any{"namespace": s.Namespace, "name": fmt.Sprintf("%s.%s.%d", s.Name, freight[:7], j), "phase": "Successful"},
			})
		}
		history = append(history, map[string]any{
			"id":                  hex.EncodeToString(sum[:]),
			"items":               map[string]any{"Warehouse/" + s.Warehouse: s.freightRef(freight)},
			"verificationHistory": verifications,
		})
	}
	if err := s.ensureFreight(ctx, newest); err != nil {
		return err
	}
	if err := s.MarkVerified(ctx, newest, now); err != nil {
		return err
	}
	name := promotionName(s.Name, newest)
	past.lastPromotion, past.finishedAt = name, now.Add(-time.Minute)
	s.mu.Lock()
	s.busy = past
	s.mu.Unlock()
	finished := past.finishedAt.Format(time.RFC3339)
	h := s.busyHealth(health, func(int) string { return health })
	h["config"] = s.busyHealthConfig()
	return s.patchStatus(ctx, map[string]any{
		"lastPromotion": map[string]any{
			"name": name, "freight": s.freightRef(newest), "finishedAt": finished,
			"status": map[string]any{"phase": "Succeeded", "finishedAt": finished, "freight": s.freightRef(newest),
				// The one health check its argocd-update step left, whose
				// output lists the BusyApps Apps (terminalPromotionStatus).
				"healthChecks": []any{map[string]any{"uses": "argocd-update", "config": s.argoCDHealthInput(newest)}}},
		},
		"freightHistory": history,
		"health":         h,
	})
}

// SetBusyHealth writes status.health of a busy Stage as Kargo's health
// assessment does when its Applications' health changes: the aggregate, one
// issue per App that is not Healthy (none clears them), and the whole
// output of BusyApps Apps, appHealth giving each App's Argo CD health by
// index. Kargo's status patch is the difference of two objects, and a JSON
// merge patch replaces an array whole, so a change of one App carries all.
func (s *Stage) SetBusyHealth(ctx context.Context, aggregate string, appHealth func(app int) string) error {
	return s.patchStatus(ctx, map[string]any{"health": s.busyHealth(aggregate, appHealth)})
}

// BusyAppName is the name of a busy Stage's app-th Argo CD Application.
func (s *Stage) BusyAppName(app int) string { return fmt.Sprintf("%s-app-%02d", s.Name, app) }

// busyHealth is status.health for a busy Stage: the entries of the output
// are Argo CD's ApplicationStatus as Kargo sanitises it (kargo-api-facts.md
// §7.11), with capitalised Name and Namespace.
func (s *Stage) busyHealth(aggregate string, appHealth func(app int) string) map[string]any {
	revision := s.busyRevision()
	apps := make([]any, 0, BusyApps)
	var issues []any
	for i := range BusyApps {
		name, health := s.BusyAppName(i), appHealth(i)
		hs := map[string]any{"status": health}
		if health != kargo.HealthHealthy {
			hs["message"] = "Waiting for rollout to finish: 1 of 3 updated replicas are available..."
			issues = append(issues, fmt.Sprintf("Argo CD Application %q in namespace %q is %s", name, "argocd", lower(health)))
		}
		apps = append(apps, map[string]any{
			"Name": name, "Namespace": "argocd",
			"health": hs,
			"sync":   map[string]any{"status": "Synced", "revision": revision},
			"operationState": map[string]any{
				"phase": "Succeeded", "finishedAt": "2026-11-30T07:58:16Z",
				"operation": map[string]any{"info": []any{map[string]any{
					"name": "kargo.akuity.io/promotion", "value": s.Name + ".01m8nq4kw9g5026g6wkck5k1xv." + revision[:7],
				}}},
			},
		})
	}
	h := map[string]any{
		"status": aggregate,
		"issues": nil, // a merge patch keeps what it does not name
		"output": []any{map[string]any{"applicationStatuses": apps}},
	}
	if len(issues) > 0 {
		h["issues"] = issues
	}
	return h
}

// busyHealthConfig is the argocd-update health check's configuration that
// Kargo keeps next to its output: the Apps and their desired revision.
func (s *Stage) busyHealthConfig() map[string]any {
	apps := make([]any, 0, BusyApps)
	for i := range BusyApps {
		apps = append(apps, map[string]any{
			"name": s.BusyAppName(i), "namespace": "argocd",
			"sources": []any{map[string]any{"repoURL": "https://github.com/example/deploy.git", "desiredRevision": s.busyRevision()}},
		})
	}
	return map[string]any{"apps": apps}
}

// busyRevision is the Git commit a busy Stage's Apps are synced to; it is
// the same across health changes, as it is in Argo CD.
func (s *Stage) busyRevision() string {
	sum := sha1.Sum([]byte(s.Namespace + "/" + s.Name)) //nolint:gosec // a stable fake commit ID
	return hex.EncodeToString(sum[:])
}
