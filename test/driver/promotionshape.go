package driver

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kargo-latch/kargo-latch/kargo"
)

// This file and its siblings make Promotions as Kargo keeps them, for the
// bench: a busy Stage's past (promotionhistory.go: the Promotions Kargo's
// garbage collector retains, 20 by default: MAX_RETAINED_PROMOTIONS) and
// new ones played through their lifecycle (promotionlive.go). Their shape
// follows Kargo's Promotion CRD
// (../shared/kargo-crds/kargo.akuity.io_promotions.yaml) and
// kargo-api-facts.md §3: the name <stage>.<ulid>.<freight[:7]>, the stage
// label and annotation, the Stage's shard label and the controller
// ownerReference that Kargo's webhook sets, the Stage's promotion template
// copied into spec.steps (this file), and the status Kargo's Promotion
// controller writes through the status subresource (promotionstatus.go).
// A Succeeded one is about 10 KB of JSON as stored, most of it the 40 Apps
// of its argocd-update step and health check; one that ended otherwise has
// no health check and is about 6 KB.

// busyPast is what WriteBusyStatus wrote of a busy Stage's past, so that
// its Promotions tell the same story: the Freight of its freightHistory,
// newest first, and its status.lastPromotion, which is its newest Promotion.
type busyPast struct {
	freight       []string
	lastPromotion string
	finishedAt    time.Time
	// promoted is how many of freight, the newest, exist with their
	// Promotions (CreatePromotionHistory).
	promoted int
}

// Kargo's promotion phases and step statuses (stepExecutionMetadata[].status).
const (
	PhasePending   = "Pending"
	PhaseRunning   = "Running"
	PhaseSucceeded = "Succeeded"
	PhaseFailed    = "Failed"
	PhaseErrored   = "Errored"
	PhaseAborted   = "Aborted"
)

// deployRepo is the GitOps repository the bench's promotion steps write to.
const deployRepo = "https://github.com/example/deploy.git"

// imageRepo is the image every bench Freight carries.
const imageRepo = "ghcr.io/example/app"

// promotionPlan is one Promotion of the Stage: what it promotes, who asked
// (empty for Kargo's own auto-promotion), and how and when it ran.
type promotionPlan struct {
	name, freight, phase, actor string
	started, finished           time.Time
}

// createPromotion creates the Promotion as Kargo's webhook leaves it
// (kargo-api-facts.md §3): the stage label and annotation, the Stage's
// shard label, the create-actor of a person's Promotion, the controller
// ownerReference to the Stage, and the Stage's promotion template as steps.
func (s *Stage) createPromotion(ctx context.Context, plan promotionPlan) error {
	labels := map[string]any{kargo.StageLabel: s.Name}
	if s.Shard != "" {
		labels[kargo.ShardLabel] = s.Shard
	}
	annotations := map[string]any{kargo.StageLabel: s.Name} // the webhook sets an annotation of the label's key too
	if plan.actor != "" {
		annotations[kargo.CreateActorAnnotation] = plan.actor
	}
	metadata := map[string]any{"name": plan.name, "namespace": s.Namespace, "labels": labels, "annotations": annotations}
	if s.UID != "" {
		metadata["ownerReferences"] = []any{map[string]any{
			"apiVersion": kargo.GroupVersion.String(), "kind": "Stage", "name": s.Name, "uid": string(s.UID),
			"controller": true, "blockOwnerDeletion": true,
		}}
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kargo.GroupVersion.String(),
		"kind":       "Promotion",
		"metadata":   metadata,
		"spec": map[string]any{
			"stage":   s.Name,
			"freight": plan.freight,
			"vars": []any{
				map[string]any{"name": "gitRepo", "value": deployRepo},
				map[string]any{"name": "imageRepo", "value": imageRepo},
			},
			"steps": s.promotionTemplate(),
		},
	}}
	if _, err := s.k.client.Resource(kargo.PromotionsResource).Namespace(s.Namespace).Create(ctx, obj, metav1.CreateOptions{FieldManager: FieldManager}); err != nil {
		return fmt.Errorf("creating Promotion %s/%s: %w", s.Namespace, plan.name, err)
	}
	return nil
}

// promotionStep is one step of the bench Stages' promotion template.
type promotionStep struct {
	uses, as string
	config   func(s *Stage) map[string]any
}

// templateSteps is the promotion template of a busy Stage, a common
// GitOps one from Kargo's documentation: render the Stage's manifests with
// the new image into its own branch, push, and sync its Argo CD Apps.
// Expressions stay unevaluated in spec.steps, as Kargo copies them.
var templateSteps = []promotionStep{
	{uses: "git-clone", config: func(*Stage) map[string]any {
		return map[string]any{"repoURL": "${{ vars.gitRepo }}", "checkout": []any{
			map[string]any{"branch": "main", "path": "./src"},
			map[string]any{"branch": "stage/${{ ctx.stage }}", "create": true, "path": "./out"},
		}}
	}},
	{uses: "git-clear", config: func(*Stage) map[string]any { return map[string]any{"path": "./out"} }},
	{uses: "kustomize-set-image", as: "update-image", config: func(*Stage) map[string]any {
		return map[string]any{"path": "./src/base", "images": []any{map[string]any{
			"image": "${{ vars.imageRepo }}", "tag": "${{ imageFrom(vars.imageRepo).Tag }}",
		}}}
	}},
	{uses: "kustomize-build", config: func(*Stage) map[string]any {
		return map[string]any{"path": "./src/stages/${{ ctx.stage }}", "outPath": "./out"}
	}},
	{uses: "git-commit", as: "commit", config: func(*Stage) map[string]any {
		return map[string]any{"path": "./out", "message": "${{ outputs['update-image'].commitMessage }}"}
	}},
	{uses: "git-push", as: "push", config: func(*Stage) map[string]any { return map[string]any{"path": "./out"} }},
	{uses: "argocd-update", config: func(s *Stage) map[string]any {
		apps := make([]any, 0, BusyApps)
		for i := range BusyApps {
			apps = append(apps, map[string]any{"name": s.BusyAppName(i)})
		}
		return map[string]any{"apps": apps}
	}},
}

// alias is the name Kargo gives a step's outputs: its "as", else step-<i>.
func (p promotionStep) alias(i int) string {
	if p.as != "" {
		return p.as
	}
	return fmt.Sprintf("step-%d", i)
}

func (s *Stage) promotionSteps() []any {
	steps := make([]any, 0, len(templateSteps))
	for _, step := range templateSteps {
		st := map[string]any{"uses": step.uses, "config": step.config(s)}
		if step.as != "" {
			st["as"] = step.as
		}
		steps = append(steps, st)
	}
	return steps
}

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func jsonSize(u *unstructured.Unstructured) int64 {
	body, err := u.MarshalJSON()
	if err != nil {
		return 0
	}
	return int64(len(body))
}
