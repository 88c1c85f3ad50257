package driver

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kargo-latch/kargo-latch/kargo"
)

// UserAbortMessage is how Kargo records an aborted verification.
const UserAbortMessage = "Verification aborted by user"

// KargoAbortIfRequested plays the branch of Kargo's verifyStageFreight that
// acts on the Stage's abort token (kargo-api-facts.md §13.4): while the
// current verification is not terminal and kargo.akuity.io/abort names its
// id, Kargo patches its run's spec.terminate and records the verification
// Failed, "Verification aborted by user", with the token's actor, never
// reading the run's phase back. It reports whether it aborted. Kargo checks
// the token before it polls the run, so a test calls this before
// KargoFollowVerification, as Kargo's pass does.
func (s *Stage) KargoAbortIfRequested(ctx context.Context) (bool, error) {
	u, err := s.get(ctx)
	if err != nil {
		return false, err
	}
	history, _, _ := unstructured.NestedSlice(u.Object, "status", "freightHistory")
	if len(history) == 0 {
		return false, nil
	}
	collection := history[0].(map[string]any)
	vh, _ := collection["verificationHistory"].([]any)
	if len(vh) == 0 {
		return false, nil
	}
	vi := vh[0].(map[string]any)
	id, _ := vi["id"].(string)
	phase, _ := vi["phase"].(string)
	token := u.GetAnnotations()[kargo.AbortAnnotation]
	if terminalVerification(phase) || id == "" || kargo.RequestTokenID(token) != id {
		return false, nil
	}
	run, _, _ := unstructured.NestedString(vi, "analysisRun", "name")
	if run == "" {
		return false, fmt.Errorf("stage %s/%s: verification %s names no AnalysisRun", s.Namespace, s.Name, id)
	}
	if _, err := s.k.client.Resource(AnalysisRunsResource).Namespace(s.Namespace).Patch(ctx, run, types.MergePatchType,
		[]byte(`{"spec":{"terminate":true}}`), metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
		return false, fmt.Errorf("terminating AnalysisRun %s/%s: %w", s.Namespace, run, err)
	}
	vh[0] = map[string]any{
		"id": id, "actor": tokenActor(token), "startTime": vi["startTime"],
		"finishTime": s.k.clock().UTC().Format(time.RFC3339), "phase": "Failed", "message": UserAbortMessage,
		"analysisRun": vi["analysisRun"],
	}
	return true, s.patchStatus(ctx, map[string]any{"freightHistory": history})
}

// tokenActor is the actor Kargo's webhook stamped into a request token, or
// kargo-latch's identity in the tests' cluster when the token is a bare id
// (the tests run no Kargo webhook).
func tokenActor(token string) string {
	var req struct {
		Actor string `json:"actor"`
	}
	if json.Unmarshal([]byte(token), &req) == nil && req.Actor != "" {
		return req.Actor
	}
	return "kubernetes:kargo-latch"
}
