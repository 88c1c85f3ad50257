package driver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kargo-latch/kargo-latch/kargo"
)

// Verification is a Stage's spec.verification: the AnalysisTemplates
// Kargo runs to verify each promoted Freight collection.
type Verification struct {
	Templates []TemplateRef
	// Args are spec.verification.args: they override the templates' args
	// by name. The driver does not evaluate ${{ }} expressions.
	Args []Arg
	// RunLabels and RunAnnotations are analysisRunMetadata.
	RunLabels, RunAnnotations map[string]string
}

// TemplateRef names an AnalysisTemplate in the Stage's namespace, or a
// ClusterAnalysisTemplate (Kind "ClusterAnalysisTemplate").
type TemplateRef struct {
	Name, Kind string
}

// Arg is a name and a value: a spec.verification.args entry, or a
// spec.vars one.
type Arg struct {
	Name, Value string
}

// WithAnalysis gives the Stage the spec.verification v.
func WithAnalysis(v Verification) StageOption {
	return func(stage *unstructured.Unstructured) {
		refs := make([]any, len(v.Templates))
		for i, t := range v.Templates {
			ref := map[string]any{"name": t.Name}
			if t.Kind != "" {
				ref["kind"] = t.Kind
			}
			refs[i] = ref
		}
		verification := map[string]any{"analysisTemplates": refs}
		if len(v.Args) > 0 {
			verification["args"] = argList(v.Args)
		}
		if len(v.RunLabels) > 0 || len(v.RunAnnotations) > 0 {
			metadata := map[string]any{}
			if len(v.RunLabels) > 0 {
				metadata["labels"] = stringMap(v.RunLabels)
			}
			if len(v.RunAnnotations) > 0 {
				metadata["annotations"] = stringMap(v.RunAnnotations)
			}
			verification["analysisRunMetadata"] = metadata
		}
		stage.Object["spec"].(map[string]any)["verification"] = verification
	}
}

// WithVars gives the Stage spec.vars, which Kargo's expressions in
// spec.verification.args see as vars.<name>.
func WithVars(vars ...Arg) StageOption {
	return func(stage *unstructured.Unstructured) {
		stage.Object["spec"].(map[string]any)["vars"] = argList(vars)
	}
}

// Why Kargo's pass starts no verification (kargo-api-facts.md §12.1).
var (
	ErrNoFreight          = errors.New("the Stage has no Freight: Kargo verifies nothing")
	ErrPromotionRunning   = errors.New("a Promotion is running: Kargo verifies nothing")
	ErrVerificationExists = errors.New("freightHistory[0] already has a verification: Kargo follows it (or, terminal, does nothing) instead of starting one")
	ErrNotHealthy         = errors.New("the Stage has not passed health checks: Kargo skips verification")
)

// KargoAdoptOrStartVerification plays the pass of Kargo's Stage controller
// that starts a verification of the current Freight collection
// (verifyStageFreight, startVerification), with Kargo's preconditions:
// Freight, no running Promotion, no verification of the collection yet,
// and status.health Healthy (else one of the Err values above, and no
// write). Then, like Kargo:
//   - without spec.verification, it records a Successful verification;
//   - if AnalysisRuns with Kargo's two labels for the collection exist, it
//     adopts the newest: freightHistory[0].verificationHistory[0] names it,
//     with its phase, and adopted is true;
//   - otherwise it creates the run Kargo would (KargoAnalysisRun) and
//     records it Pending.
//
// It returns the run's name ("" without spec.verification). When the
// verification it records is already Successful, Kargo's same pass marks
// the Freight verified: KargoFollowVerification plays that.
func (s *Stage) KargoAdoptOrStartVerification(ctx context.Context) (run string, adopted bool, err error) {
	u, err := s.get(ctx)
	if err != nil {
		return "", false, err
	}
	history, _, _ := unstructured.NestedSlice(u.Object, "status", "freightHistory")
	if len(history) == 0 {
		return "", false, ErrNoFreight
	}
	if cur, _, _ := unstructured.NestedMap(u.Object, "status", "currentPromotion"); len(cur) > 0 {
		return "", false, ErrPromotionRunning
	}
	collection := history[0].(map[string]any)
	if vh, _ := collection["verificationHistory"].([]any); len(vh) > 0 {
		return "", false, fmt.Errorf("%w: %v", ErrVerificationExists, vh[0])
	}
	if health, _, _ := unstructured.NestedString(u.Object, "status", "health", "status"); health != kargo.HealthHealthy {
		return "", false, fmt.Errorf("%w (health %q)", ErrNotHealthy, health)
	}
	now := s.k.clock().UTC()
	vi := map[string]any{"id": newUUID(), "startTime": now.Format(time.RFC3339)}
	verification, _, _ := unstructured.NestedMap(u.Object, "spec", "verification")
	if verification == nil {
		vi["phase"], vi["finishTime"] = "Successful", now.Format(time.RFC3339)
	} else if run, adopted, err = s.adoptOrCreateRun(ctx, collection, vi, now); err != nil {
		return "", false, err
	}
	collection["verificationHistory"] = []any{vi}
	return run, adopted, s.patchStatus(ctx, map[string]any{"freightHistory": history})
}

// adoptOrCreateRun is the part of Kargo's startVerification that finds or
// makes the AnalysisRun; it fills vi.
func (s *Stage) adoptOrCreateRun(ctx context.Context, collection, vi map[string]any, now time.Time) (run string, adopted bool, err error) {
	id, _ := collection["id"].(string)
	runs, err := s.k.AnalysisRuns(ctx, s.Namespace, s.Name, id)
	if err != nil {
		return "", false, err
	}
	if len(runs) > 0 {
		// Kargo main: the adopted verification's finishTime is the
		// pass's time, its phase the run's.
		vi["finishTime"] = now.Format(time.RFC3339)
		setPhase(vi, AnalysisRunPhase(&runs[0]))
		vi["analysisRun"] = runRef(&runs[0])
		return runs[0].GetName(), true, nil
	}
	obj, err := s.KargoAnalysisRun(ctx)
	if err != nil {
		return "", false, err
	}
	created, err := s.k.client.Resource(AnalysisRunsResource).Namespace(s.Namespace).Create(ctx, obj, metav1.CreateOptions{FieldManager: FieldManager})
	if err != nil {
		return "", false, fmt.Errorf("creating AnalysisRun %s: %w", obj.GetName(), err)
	}
	// Pending, with Kargo's quirk: finishTime is the run's creation.
	vi["phase"] = "Pending"
	vi["finishTime"] = created.GetCreationTimestamp().UTC().Format(time.RFC3339)
	vi["analysisRun"] = runRef(created)
	return created.GetName(), false, nil
}

// KargoFollowVerification plays Kargo's later passes over a verification
// it follows whatever the health (getVerificationResult): while
// freightHistory[0].verificationHistory[0] is not terminal, it copies its
// AnalysisRun's phase, message and completion time into it. Then, as
// markFreightVerifiedForStage does in a pass that sees the Stage Healthy
// (only then), a Successful verification writes status.verifiedIn.<stage>
// on each Freight of the collection not yet verified there, with the
// verification's finishTime. It returns the verification's phase.
func (s *Stage) KargoFollowVerification(ctx context.Context) (phase string, err error) {
	u, err := s.get(ctx)
	if err != nil {
		return "", err
	}
	history, _, _ := unstructured.NestedSlice(u.Object, "status", "freightHistory")
	if len(history) == 0 {
		return "", ErrNoFreight
	}
	collection := history[0].(map[string]any)
	vh, _ := collection["verificationHistory"].([]any)
	if len(vh) == 0 {
		return "", fmt.Errorf("stage %s/%s: freightHistory[0] has no verification to follow", s.Namespace, s.Name)
	}
	vi := vh[0].(map[string]any)
	phase, _ = vi["phase"].(string)
	if !terminalVerification(phase) {
		name, _, _ := unstructured.NestedString(vi, "analysisRun", "name")
		if name == "" {
			return phase, fmt.Errorf("stage %s/%s: verification %v names no AnalysisRun", s.Namespace, s.Name, vi["id"])
		}
		run, err := s.k.AnalysisRun(ctx, s.Namespace, name)
		if err != nil {
			return phase, fmt.Errorf("reading AnalysisRun %s/%s: %w", s.Namespace, name, err)
		}
		next := map[string]any{"id": vi["id"], "analysisRun": runRef(run)}
		for _, key := range []string{"actor", "startTime"} {
			if v, ok := vi[key]; ok {
				next[key] = v
			}
		}
		phase = AnalysisRunPhase(run)
		setPhase(next, phase)
		if msg, _, _ := unstructured.NestedString(run.Object, "status", "message"); msg != "" {
			next["message"] = msg
		}
		if done, _, _ := unstructured.NestedString(run.Object, "status", "completedAt"); done != "" {
			next["finishTime"] = done
		}
		vh[0] = next
		if err := s.patchStatus(ctx, map[string]any{"freightHistory": history}); err != nil {
			return phase, err
		}
		vi = next
	}
	if phase != "Successful" {
		return phase, nil
	}
	if health, _, _ := unstructured.NestedString(u.Object, "status", "health", "status"); health != kargo.HealthHealthy {
		return phase, nil
	}
	return phase, s.markCollectionVerified(ctx, collection, vi)
}

// markCollectionVerified writes verifiedIn.<stage> with the verification's
// finishTime on each Freight of the collection that lacks it.
func (s *Stage) markCollectionVerified(ctx context.Context, collection, vi map[string]any) error {
	finished, _ := vi["finishTime"].(string)
	at, err := time.Parse(time.RFC3339, finished)
	if err != nil {
		return fmt.Errorf("stage %s/%s: verification %v has no finishTime: %w", s.Namespace, s.Name, vi["id"], err)
	}
	for _, name := range collectionFreight(collection) {
		f, err := s.k.Freight(ctx, s.Namespace, name)
		if err != nil {
			return err
		}
		if _, ok, _ := unstructured.NestedMap(f.Object, "status", "verifiedIn", s.Name); ok {
			continue
		}
		if err := s.MarkVerified(ctx, name, at); err != nil {
			return err
		}
	}
	return nil
}

// WithRolloutsControllerInstanceID returns a driver like k whose Kargo has
// ROLLOUTS_CONTROLLER_INSTANCE_ID set: the runs it creates carry the
// argo-rollouts.argoproj.io/controller-instance-id label.
func (k *Kargo) WithRolloutsControllerInstanceID(id string) *Kargo {
	c := *k
	c.rolloutsInstanceID = id
	return &c
}

func terminalVerification(phase string) bool {
	switch phase {
	case "Successful", "Failed", "Error", "Aborted", "Inconclusive":
		return true
	}
	return false
}

// setPhase sets a VerificationInfo's phase, which Kargo omits when empty
// (a run Argo Rollouts has not picked up yet).
func setPhase(vi map[string]any, phase string) {
	if phase != "" {
		vi["phase"] = phase
	}
}

// runRef is a VerificationInfo's analysisRun: phase is required, even "".
func runRef(run *unstructured.Unstructured) map[string]any {
	return map[string]any{"name": run.GetName(), "namespace": run.GetNamespace(), "phase": AnalysisRunPhase(run)}
}

// collectionFreight are the names of a collection's Freight, sorted.
func collectionFreight(collection map[string]any) []string {
	items, _ := collection["items"].(map[string]any)
	var names []string
	for _, item := range items {
		if name, _ := item.(map[string]any)["name"].(string); name != "" {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

func argList(args []Arg) []any {
	list := make([]any, len(args))
	for i, a := range args {
		list[i] = map[string]any{"name": a.Name, "value": a.Value}
	}
	return list
}

func stringMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
