package driver

import (
	"context"
	"crypto/sha1" //nolint:gosec // Kargo derives Freight collection IDs with SHA-1
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kargo-latch/kargo-latch/kargo"
)

// patchPromotionStatus sends a JSON merge patch of a Promotion's status
// subresource, as Kargo's kubeclient.PatchStatus does, and returns the size
// of the object as stored.
func (s *Stage) patchPromotionStatus(ctx context.Context, name string, status map[string]any) (int64, error) {
	body, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return 0, err
	}
	u, err := s.k.client.Resource(kargo.PromotionsResource).Namespace(s.Namespace).
		Patch(ctx, name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: FieldManager}, "status")
	if err != nil {
		return 0, fmt.Errorf("patching status of Promotion %s/%s: %w", s.Namespace, name, err)
	}
	return jsonSize(u), nil
}

// runningPromotionStatus is a Promotion's status while its last step,
// argocd-update, waits for Argo CD.
func (s *Stage) runningPromotionStatus(plan promotionPlan) map[string]any {
	status := s.promotionProgress(plan)
	status["phase"] = PhaseRunning
	return status
}

// terminalPromotionStatus is a Promotion's status once it ended in
// plan.phase. A failure, error or abort is in the last step, argocd-update,
// so only a Succeeded Promotion carries the health check it produces.
func (s *Stage) terminalPromotionStatus(plan promotionPlan) map[string]any {
	status := s.promotionProgress(plan)
	status["phase"] = plan.phase
	status["finishedAt"] = rfc3339(plan.finished)
	if msg := promotionMessage(plan.phase); msg != "" {
		status["message"] = msg
	}
	meta := status["stepExecutionMetadata"].([]any)
	last := meta[len(meta)-1].(map[string]any)
	last["finishedAt"] = rfc3339(plan.finished)
	switch plan.phase {
	case PhaseSucceeded:
		last["status"] = PhaseSucceeded
		status["healthChecks"] = []any{map[string]any{"uses": "argocd-update", "config": s.argoCDHealthInput(plan.freight)}}
	case PhaseFailed, PhaseErrored:
		last["status"], last["message"], last["errorCount"] = plan.phase, promotionMessage(plan.phase), int64(1)
	default:
		last["status"] = PhaseAborted
	}
	return status
}

// promotionProgress is the status common to a running and an ended
// Promotion: its Freight, every step but the last Succeeded with their
// outputs in state, and the last one running.
func (s *Stage) promotionProgress(plan promotionPlan) map[string]any {
	ref := promotionFreightRef(plan.freight, s.Warehouse)
	commit := s.promotionCommit(plan.freight)
	meta := make([]any, 0, len(templateSteps))
	for i, step := range templateSteps {
		started := plan.started.Add(time.Duration(i) * 2 * time.Second)
		m := map[string]any{"alias": step.alias(i), "startedAt": rfc3339(started), "status": PhaseSucceeded, "finishedAt": rfc3339(started.Add(time.Second))}
		if i == len(templateSteps)-1 {
			m["status"] = PhaseRunning
			delete(m, "finishedAt")
		}
		meta = append(meta, m)
	}
	return map[string]any{
		"freight": ref,
		"freightCollection": map[string]any{
			"id":    freightCollectionID(plan.freight),
			"items": map[string]any{"Warehouse/" + s.Warehouse: ref},
		},
		"startedAt":             rfc3339(plan.started),
		"currentStep":           int64(len(templateSteps) - 1),
		"stepExecutionMetadata": meta,
		"state": map[string]any{
			"update-image": map[string]any{"commitMessage": fmt.Sprintf("Updated %s to %s", imageRepo, freightTag(plan.freight))},
			"commit":       map[string]any{"commit": commit},
			"push": map[string]any{
				"branch": "stage/" + s.Name, "commit": commit,
				"commitURL": strings.TrimSuffix(deployRepo, ".git") + "/commit/" + commit,
			},
		},
	}
}

// argoCDHealthInput is the configuration of the health check that Kargo's
// argocd-update step leaves on its Promotion (Kargo's ArgoCDHealthInput):
// each App with the revision it must be synced to, the pushed commit.
func (s *Stage) argoCDHealthInput(freight string) map[string]any {
	revisions := []any{s.promotionCommit(freight)}
	apps := make([]any, 0, BusyApps)
	for i := range BusyApps {
		apps = append(apps, map[string]any{"name": s.BusyAppName(i), "namespace": "argocd", "desiredRevisions": revisions})
	}
	return map[string]any{"apps": apps}
}

// promotionCommit is the Git commit a Promotion of freight pushed: for the
// Stage's current Freight, the revision its busy Apps are synced to.
func (s *Stage) promotionCommit(freight string) string {
	s.mu.Lock()
	current := s.busy != nil && s.busy.freight[0] == freight
	s.mu.Unlock()
	if current {
		return s.busyRevision()
	}
	return sha1Hex(s.Name + "/" + freight)
}

// promotionFreightRef is a FreightReference as a Promotion's status holds
// it: the Freight's name, origin and artifacts.
func promotionFreightRef(freight, warehouse string) map[string]any {
	return map[string]any{
		"name":   freight,
		"origin": map[string]any{"kind": "Warehouse", "name": warehouse},
		"images": freightImages(freight),
	}
}

// freightImages is the image a bench Freight carries, as ensureFreight
// makes it.
func freightImages(freight string) []any {
	return []any{map[string]any{"repoURL": imageRepo, "tag": freightTag(freight), "digest": "sha256:" + freight + freight[:24]}}
}

func freightTag(freight string) string { return "v" + freight[:7] }

// freightCollectionID is Kargo's ID of a collection: the hex SHA-1 of its
// sorted Freight names joined with ",".
func freightCollectionID(freight string) string { return sha1Hex(freight) }

// sha1Hex is the hex SHA-1 of s: a Git commit ID, or Kargo's collection ID.
func sha1Hex(s string) string {
	sum := sha1.Sum([]byte(s)) //nolint:gosec // Kargo's and Git's own ID scheme
	return hex.EncodeToString(sum[:])
}
