package driver

import (
	"context"
	"crypto/sha1" //nolint:gosec // Kargo derives Freight collection IDs with SHA-1
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kargo-latch/kargo-latch/kargo"
)

// This file makes Promotions as Kargo keeps them, for the bench: a busy
// Stage's past (the Promotions Kargo's garbage collector retains, 20 by
// default: MAX_RETAINED_PROMOTIONS) and new ones played through their
// lifecycle. Their shape follows Kargo's Promotion CRD
// (../shared/kargo-crds/kargo.akuity.io_promotions.yaml) and
// kargo-api-facts.md §3: the name <stage>.<ulid>.<freight[:7]>, the stage
// label and annotation, the Stage's shard label and the controller
// ownerReference that Kargo's webhook sets, the Stage's promotion template
// copied into spec.steps, and the status Kargo's Promotion controller
// writes through the status subresource. A Succeeded one is about 10 KB of
// JSON as stored, most of it the 40 Apps of its argocd-update step and
// health check; one that ended otherwise has no health check and is about
// 6 KB.

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

// PromotionHistory is what CreatePromotionHistory made, with the size of
// the objects as the API server stores them (managedFields included).
type PromotionHistory struct {
	Names        []string // oldest first, the order Kargo's garbage collector deletes in
	Bytes        int64
	Freight      int // Freight objects created
	FreightBytes int64
}

// CreatePromotionHistory creates n terminal Promotions of a Stage written
// by WriteBusyStatus, and the Freight they promote, as Kargo would have
// left them: every Freight of the Stage's freightHistory was promoted by
// two Promotions, the newer of which Succeeded (the older failed, errored,
// was aborted, or was a re-promotion), and the newest Promotion is the
// Stage's status.lastPromotion. Their names' ULIDs and their times lie in
// the past, before status.lastPromotion, as the Freight's verifications do.
// The Freight of freightHistory[0] exists already; the others are created,
// verified in the Stage.
func (s *Stage) CreatePromotionHistory(ctx context.Context, n int) (PromotionHistory, error) {
	var h PromotionHistory
	s.mu.Lock()
	past := s.busy
	s.mu.Unlock()
	if past == nil {
		return h, fmt.Errorf("stage %s/%s: no busy status to give a history (WriteBusyStatus first)", s.Namespace, s.Name)
	}
	created := map[string]bool{past.freight[0]: true}
	for i := range n {
		age := n - 1 - i // 0 for the newest
		k := min(age/2, len(past.freight)-1)
		freight := past.freight[k]
		plan := promotionPlan{freight: freight, phase: PhaseSucceeded, finished: past.finishedAt.Add(-time.Duration(age) * 5 * time.Hour)}
		if age%2 == 1 {
			// The older of a Freight's two Promotions.
			plan.phase = [...]string{PhaseFailed, PhaseSucceeded, PhaseErrored, PhaseAborted}[(age/2)%4]
			plan.actor = "email:release-manager@example.com"
		}
		plan.started = plan.finished.Add(-45 * time.Second)
		plan.name = promotionNameAt(s.Name, freight, plan.started)
		if age == 0 {
			plan.name = past.lastPromotion
		}
		if !created[freight] {
			// Verified in the Stage after the newer, successful, of its
			// Promotions.
			verifiedAt := past.finishedAt.Add(-time.Duration(2*k)*5*time.Hour + 10*time.Minute)
			size, err := s.createPastFreight(ctx, freight, verifiedAt)
			if err != nil {
				return h, err
			}
			created[freight] = true
			h.Freight++
			h.FreightBytes += size
		}
		if err := s.createPromotion(ctx, plan); err != nil {
			return h, err
		}
		stored, err := s.patchPromotionStatus(ctx, plan.name, s.terminalPromotionStatus(plan))
		if err != nil {
			return h, err
		}
		h.Names = append(h.Names, plan.name)
		h.Bytes += stored
	}
	s.mu.Lock()
	past.promoted = len(created)
	s.mu.Unlock()
	return h, nil
}

// PastFreight lists the Freight of the Stage's freightHistory that exists,
// newest first: the Freight WriteBusyStatus made and the Freight that
// CreatePromotionHistory made for its Promotions. Nil for a Stage that is
// not busy.
func (s *Stage) PastFreight() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.busy == nil {
		return nil
	}
	return append([]string(nil), s.busy.freight[:max(1, s.busy.promoted)]...)
}

// LivePromotion is a Promotion the driver plays through Kargo's lifecycle.
type LivePromotion struct {
	s    *Stage
	plan promotionPlan
}

// Name is the Promotion's name.
func (p *LivePromotion) Name() string { return p.plan.name }

// QueuePromotion creates a Promotion of freight (which must exist) to the
// Stage as Kargo's controller auto-promotes it (no create-actor), shaped as
// Kargo's webhook leaves it, and marks it Pending, as Kargo's Promotion
// controller does when it first sees it. Only the Promotion is written:
// status.currentPromotion of the Stage is not.
func (s *Stage) QueuePromotion(ctx context.Context, freight string) (*LivePromotion, error) {
	p := &LivePromotion{s: s, plan: promotionPlan{name: promotionName(s.Name, freight), freight: freight, phase: PhasePending}}
	if err := s.createPromotion(ctx, p.plan); err != nil {
		return nil, err
	}
	return p, p.patch(ctx, map[string]any{"phase": PhasePending})
}

// Run marks the Promotion Running as Kargo's Promotion controller leaves it
// between passes: every step done up to argocd-update, which waits for Argo
// CD's sync.
func (p *LivePromotion) Run(ctx context.Context) error {
	p.plan.phase, p.plan.started = PhaseRunning, p.s.k.clock().UTC()
	return p.patch(ctx, p.s.runningPromotionStatus(p.plan))
}

// Finish writes the Promotion's terminal status in phase, as Kargo's
// Promotion controller does when its last step ends.
func (p *LivePromotion) Finish(ctx context.Context, phase string) error {
	p.plan.phase, p.plan.finished = phase, p.s.k.clock().UTC()
	if p.plan.started.IsZero() {
		p.plan.started = p.plan.finished
	}
	return p.patch(ctx, p.s.terminalPromotionStatus(p.plan))
}

func (p *LivePromotion) patch(ctx context.Context, status map[string]any) error {
	_, err := p.s.patchPromotionStatus(ctx, p.plan.name, status)
	return err
}

// DeletePromotion deletes one of the Stage's Promotions, as Kargo's garbage
// collector deletes the oldest terminal ones beyond MAX_RETAINED_PROMOTIONS.
func (s *Stage) DeletePromotion(ctx context.Context, name string) error {
	err := s.k.client.Resource(kargo.PromotionsResource).Namespace(s.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

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

// createPastFreight creates a Freight of the Stage's past, as its Warehouse
// made it, verified in the Stage at verifiedAt, and returns its size as
// stored.
func (s *Stage) createPastFreight(ctx context.Context, freight string, verifiedAt time.Time) (int64, error) {
	client := s.k.client.Resource(kargo.FreightsResource).Namespace(s.Namespace)
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kargo.GroupVersion.String(),
		"kind":       "Freight",
		"metadata":   map[string]any{"name": freight, "namespace": s.Namespace},
		"alias":      "freight-" + freight[:7],
		"origin":     map[string]any{"kind": "Warehouse", "name": s.Warehouse},
		"images":     freightImages(freight),
	}}
	if _, err := client.Create(ctx, obj, metav1.CreateOptions{FieldManager: FieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
		return 0, fmt.Errorf("creating Freight %s: %w", freight, err)
	}
	body, err := json.Marshal(map[string]any{"status": map[string]any{
		"verifiedIn": map[string]any{s.Name: map[string]any{"verifiedAt": rfc3339(verifiedAt)}},
	}})
	if err != nil {
		return 0, err
	}
	u, err := client.Patch(ctx, freight, types.MergePatchType, body, metav1.PatchOptions{FieldManager: FieldManager}, "status")
	if err != nil {
		return 0, fmt.Errorf("patching status of Freight %s/%s: %w", s.Namespace, freight, err)
	}
	return jsonSize(u), nil
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

func rfc3339(t time.Time) string { return t.UTC().Format(time.RFC3339) }

func jsonSize(u *unstructured.Unstructured) int64 {
	body, err := u.MarshalJSON()
	if err != nil {
		return 0
	}
	return int64(len(body))
}

// promotionNameAt is a Promotion name as Kargo's webhook gives it, whose
// ULID was made at a given time: <stage>.<ulid>.<first 7 of freight>.
// promotionName makes them now, increasing; these lie in the past.
func promotionNameAt(stage, freight string, at time.Time) string {
	return fmt.Sprintf("%s.%s.%s", stage, ulidAt(at), freight[:7])
}
