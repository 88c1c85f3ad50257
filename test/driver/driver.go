// Package driver plays Kargo's part against a test apiserver. It writes
// Stage status the way Kargo's Stage controller does (JSON merge patches of
// the status subresource, with Kargo's own shapes and health issue texts),
// so that kargo-latch can be tested without running Kargo.
//
// See ../shared/docs/kargo-api-facts.md for the shapes reproduced here.
package driver

import (
	"context"
	"crypto/rand"
	"crypto/sha1" //nolint:gosec // Kargo derives Freight collection IDs with SHA-1
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/kargo-latch/kargo-latch/kargo"
)

// Kargo's health issue texts when it does not assess health.
const (
	IssuePromotionInProgress = "Cannot assess health because a Promotion is currently in progress"
	IssueLastPromotionFailed = "Cannot assess health because last Promotion did not succeed"
)

// FieldManager names the driver's writes, as Kargo's controller would be.
const FieldManager = "kargo-controller"

// Kargo talks to one apiserver as Kargo's controller would.
type Kargo struct {
	client dynamic.Interface
	clock  func() time.Time
	// rolloutsInstanceID is Kargo's ROLLOUTS_CONTROLLER_INSTANCE_ID
	// (WithRolloutsControllerInstanceID).
	rolloutsInstanceID string
}

// New returns a driver writing with client.
func New(client dynamic.Interface) *Kargo {
	return &Kargo{client: client, clock: time.Now}
}

// WithClock returns a driver like k whose Kargo writes times from clock:
// a Kargo that acted in the past.
func (k *Kargo) WithClock(clock func() time.Time) *Kargo {
	return &Kargo{client: k.client, clock: clock, rolloutsInstanceID: k.rolloutsInstanceID}
}

// Stage is one Stage the driver plays Kargo for.
type Stage struct {
	k         *Kargo
	Namespace string
	Name      string
	Warehouse string
	UID       types.UID // for the ownerReference Kargo's webhook puts on its Promotions
	Shard     string    // its kargo.akuity.io/shard label, which its Promotions carry

	mu      sync.Mutex
	busy    *busyPast // what WriteBusyStatus wrote, for its Promotions (promotionshape.go)
	running string    // name of the running Promotion, if any
	// steps are the Stage's promotion template, which Kargo copies into
	// each of its Promotions; healthChecks are what each successful one
	// leaves in status.healthChecks: one per argocd-update step (apps.go).
	steps        []any
	healthChecks []any
	// RV is the resourceVersion of the driver's last write.
	RV string
}

// StageOption changes the Stage CreateStage makes.
type StageOption func(stage *unstructured.Unstructured)

// WithVerification gives the Stage a spec.verification, so that Kargo
// would verify each promotion with an AnalysisRun.
func WithVerification() StageOption {
	return func(stage *unstructured.Unstructured) {
		stage.Object["spec"].(map[string]any)["verification"] = map[string]any{"analysisTemplates": []any{map[string]any{"name": "smoke-test"}}}
	}
}

// WithShard puts the Stage in a shard, as Kargo's Stage webhook leaves it:
// spec.shard, and the label kargo.akuity.io/shard synced from it.
func WithShard(shard string) StageOption {
	return func(stage *unstructured.Unstructured) {
		stage.Object["spec"].(map[string]any)["shard"] = shard
		labels := stage.GetLabels()
		if labels == nil {
			labels = map[string]string{}
		}
		labels[kargo.ShardLabel] = shard
		stage.SetLabels(labels)
	}
}

// CreateStage creates a Stage that requests Freight directly from a
// Warehouse, with one promotion step, an argocd-update of the App named as
// the Stage (WithApps and WithHealthChecks change it). annotations may be nil.
func (k *Kargo) CreateStage(ctx context.Context, ns, name string, annotations map[string]string, opts ...StageOption) (*Stage, error) {
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kargo.GroupVersion.String(),
		"kind":       "Stage",
		"metadata":   map[string]any{"name": name, "namespace": ns},
		"spec": map[string]any{
			"requestedFreight": []any{map[string]any{
				"origin":  map[string]any{"kind": "Warehouse", "name": "warehouse"},
				"sources": map[string]any{"direct": true},
			}},
			"promotionTemplate": map[string]any{"spec": map[string]any{
				"steps": []any{map[string]any{"uses": "argocd-update", "config": map[string]any{"apps": []any{map[string]any{"name": name}}}}},
			}},
		},
	}}
	if annotations != nil {
		obj.SetAnnotations(annotations)
	}
	for _, o := range opts {
		o(obj)
	}
	created, err := k.client.Resource(kargo.StagesResource).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	return &Stage{k: k, Namespace: ns, Name: name, Warehouse: "warehouse", RV: created.GetResourceVersion(),
		UID: created.GetUID(), Shard: created.GetLabels()[kargo.ShardLabel],
		steps: promotionTemplateOf(created), healthChecks: healthChecksOf(created)}, nil
}

// StartPromotion sets status.currentPromotion to a new Promotion for new
// Freight, as Kargo does when a queued Promotion begins to run, and reports
// health Unknown as Kargo does while a Promotion runs. It returns the
// Promotion's name.
func (s *Stage) StartPromotion(ctx context.Context) (string, error) {
	s.mu.Lock()
	freight := newFreightName()
	name := promotionName(s.Name, freight)
	s.running = name
	s.mu.Unlock()
	return name, s.patchStatus(ctx, map[string]any{
		"currentPromotion": map[string]any{"name": name, "freight": s.freightRef(freight)},
		"health":           map[string]any{"status": kargo.HealthUnknown, "issues": []any{IssuePromotionInProgress}},
	})
}

// FinishPromotion records the running Promotion (or a new one, when none
// runs) as finished in phase, as Kargo's Stage controller does when it
// replays a terminal Promotion:
//   - status.lastPromotion gets the Promotion with its status and finishedAt;
//   - status.currentPromotion is cleared;
//   - on Succeeded, lastPromotion.status carries the health checks the
//     Promotion left (one per argocd-update step; a busy Stage's names its
//     BusyApps Apps, as WriteBusyStatus's does), a new freightHistory[0]
//     is pushed and health is cleared;
//   - otherwise health is Unknown with "last Promotion did not succeed".
func (s *Stage) FinishPromotion(ctx context.Context, phase string) (name string, err error) {
	s.mu.Lock()
	name = s.running
	if name == "" {
		name = promotionName(s.Name, newFreightName())
	}
	s.running = ""
	s.mu.Unlock()
	freight := name[strings.LastIndex(name, ".")+1:]
	freight = s.fullFreight(freight)
	finished := s.k.clock().UTC().Format(time.RFC3339)
	status := map[string]any{
		"currentPromotion": nil,
		"lastPromotion": map[string]any{
			"name":       name,
			"freight":    s.freightRef(freight),
			"finishedAt": finished,
			"status": map[string]any{
				"phase":      phase,
				"message":    promotionMessage(phase),
				"finishedAt": finished,
				"freight":    s.freightRef(freight),
			},
		},
	}
	if phase == "Succeeded" {
		if checks := s.successHealthChecks(freight); len(checks) > 0 {
			lastStatus := status["lastPromotion"].(map[string]any)["status"].(map[string]any)
			lastStatus["healthChecks"] = checks
		}
		if err := s.ensureFreight(ctx, freight); err != nil {
			return "", err
		}
		history, err := s.pushFreight(ctx, freight)
		if err != nil {
			return "", err
		}
		status["freightHistory"] = history
		status["health"] = nil
	} else {
		status["health"] = map[string]any{"status": kargo.HealthUnknown, "issues": []any{IssueLastPromotionFailed}}
	}
	rest, err := s.replayIntent(ctx, name, phase, status) // a person's Promotion: holds.go
	if err != nil {
		return "", err
	}
	if err := s.patchStatus(ctx, status); err != nil || rest == nil {
		return name, err
	}
	return name, rest(ctx)
}

// ReplayOlderSuccess reproduces Kargo's replay-order quirk: an older
// Promotion succeeds after a newer one was aborted, so freightHistory[0]
// moves to new Freight while lastPromotion stays the aborted one.
func (s *Stage) ReplayOlderSuccess(ctx context.Context) error {
	history, err := s.pushFreight(ctx, newFreightName())
	if err != nil {
		return err
	}
	return s.patchStatus(ctx, map[string]any{"freightHistory": history})
}

// SetHealth sets status.health as Kargo's health assessment does.
func (s *Stage) SetHealth(ctx context.Context, status string, issues ...string) error {
	h := map[string]any{"status": status}
	if len(issues) > 0 {
		h["issues"] = issues
	}
	return s.patchStatus(ctx, map[string]any{"health": h})
}

// SetVerification records a verification of the current Freight in phase,
// newest first in freightHistory[0].verificationHistory, and returns its ID.
func (s *Stage) SetVerification(ctx context.Context, phase, message string) (string, error) {
	u, err := s.get(ctx)
	if err != nil {
		return "", err
	}
	history, _, _ := unstructured.NestedSlice(u.Object, "status", "freightHistory")
	if len(history) == 0 {
		return "", fmt.Errorf("stage %s/%s has no Freight to verify", s.Namespace, s.Name)
	}
	newest := history[0].(map[string]any)
	now := s.k.clock().UTC().Format(time.RFC3339)
	id := newUUID()
	v := map[string]any{"id": id, "actor": "controller:kargo", "phase": phase, "startTime": now}
	if message != "" {
		v["message"] = message
	}
	if phase != "Pending" && phase != "Running" {
		v["finishTime"] = now
	}
	verifications, _ := newest["verificationHistory"].([]any)
	newest["verificationHistory"] = append([]any{v}, verifications...)
	return id, s.patchStatus(ctx, map[string]any{"freightHistory": history})
}

// ClearStatus removes the whole status, as for a Stage Kargo never reconciled.
func (s *Stage) ClearStatus(ctx context.Context) error {
	return s.patchStatus(ctx, nil)
}

// Get returns the Stage as it is on the server.
func (s *Stage) Get(ctx context.Context) (*unstructured.Unstructured, error) { return s.get(ctx) }

func (s *Stage) get(ctx context.Context) (*unstructured.Unstructured, error) {
	return s.k.client.Resource(kargo.StagesResource).Namespace(s.Namespace).Get(ctx, s.Name, metav1.GetOptions{})
}

// pushFreight returns freightHistory with a new newest collection holding
// freight, at most 10 long, as Kargo keeps it.
func (s *Stage) pushFreight(ctx context.Context, freight string) ([]any, error) {
	u, err := s.get(ctx)
	if err != nil {
		return nil, err
	}
	history, _, _ := unstructured.NestedSlice(u.Object, "status", "freightHistory")
	sum := sha1.Sum([]byte(freight)) //nolint:gosec // Kargo's own ID scheme
	entry := map[string]any{
		"id":    hex.EncodeToString(sum[:]),
		"items": map[string]any{"Warehouse/" + s.Warehouse: s.freightRef(freight)},
	}
	history = append([]any{entry}, history...)
	return history[:min(len(history), 10)], nil
}

// patchStatus sends a JSON merge patch of the status subresource, as
// Kargo's kubeclient.PatchStatus does. A nil status removes it.
func (s *Stage) patchStatus(ctx context.Context, status map[string]any) error {
	body, err := json.Marshal(map[string]any{"status": status})
	if err != nil {
		return err
	}
	u, err := s.k.client.Resource(kargo.StagesResource).Namespace(s.Namespace).
		Patch(ctx, s.Name, types.MergePatchType, body, metav1.PatchOptions{FieldManager: FieldManager}, "status")
	if err != nil {
		return fmt.Errorf("patching status of Stage %s/%s: %w", s.Namespace, s.Name, err)
	}
	s.mu.Lock()
	s.RV = u.GetResourceVersion()
	s.mu.Unlock()
	return nil
}

// LastRV is the resourceVersion of the driver's last write to the Stage.
func (s *Stage) LastRV() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.RV
}

func (s *Stage) freightRef(freight string) map[string]any {
	return map[string]any{"name": freight, "origin": map[string]any{"kind": "Warehouse", "name": s.Warehouse}}
}

// fullFreight maps the 7-character freight suffix of a Promotion name back
// to the full name the driver made.
func (s *Stage) fullFreight(short string) string {
	freightNames.Lock()
	defer freightNames.Unlock()
	if full, ok := freightNames.m[short]; ok {
		return full
	}
	return short
}

func promotionMessage(phase string) string {
	switch phase {
	case "Failed":
		return "step \"argocd-update\" failed: application sync failed"
	case "Errored":
		return "step \"argocd-update\" errored: connection refused"
	case "Aborted":
		return "Promotion terminated by kubernetes:admin"
	}
	return ""
}

var freightNames = struct {
	sync.Mutex
	m map[string]string
}{m: map[string]string{}}

// newFreightName returns a Freight name in Kargo's form: 40 hex digits.
func newFreightName() string {
	b := make([]byte, 20)
	_, _ = rand.Read(b)
	name := hex.EncodeToString(b)
	freightNames.Lock()
	freightNames.m[name[:7]] = name
	freightNames.Unlock()
	return name
}

var ulidState = struct {
	sync.Mutex
	last string
}{}

// promotionName builds a name in the form Kargo's webhook gives Promotions:
// <stage>.<ulid>.<first 7 of freight>, lowercase, ULIDs increasing.
func promotionName(stage, freight string) string {
	ulidState.Lock()
	defer ulidState.Unlock()
	for {
		if id := ulidAt(time.Now()); id > ulidState.last {
			ulidState.last = id
			return fmt.Sprintf("%s.%s.%s", stage, id, freight[:7])
		}
	}
}

// ulidAt is a lowercase ULID of time at: its milliseconds, then 80 random
// bits, in Crockford's base 32.
func ulidAt(at time.Time) string {
	const crockford = "0123456789abcdefghjkmnpqrstvwxyz"
	var b [26]byte
	ms := uint64(at.UnixMilli())
	for i := 9; i >= 0; i-- {
		b[i] = crockford[ms&31]
		ms >>= 5
	}
	rnd := make([]byte, 16)
	_, _ = rand.Read(rnd)
	for i := 10; i < 26; i++ {
		b[i] = crockford[rnd[i-10]&31]
	}
	return string(b[:])
}

func newUUID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	b[6], b[8] = b[6]&0x0f|0x40, b[8]&0x3f|0x80
	h := hex.EncodeToString(b)
	return strings.Join([]string{h[:8], h[8:12], h[12:16], h[16:20], h[20:]}, "-")
}
