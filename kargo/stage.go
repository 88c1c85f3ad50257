package kargo

import (
	"slices"
	"strings"
	"time"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kargo-latch/kargo-latch/latch"
)

// OwnPrefix marks the labels and annotations that kargo-latch owns or reads;
// the mirror keeps only these of a Stage's metadata.
const OwnPrefix = "kargo-latch.io/"

// Stage is the part of a Kargo Stage that kargo-latch reads.
type Stage struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	// State is the kargo-latch.io/state annotation (the latch record),
	// packed; the mirror's Annotations leave it out.
	State Packed
	// HasVerification is true when spec.verification is set.
	HasVerification bool
	// Status is nil when the Stage has no status at all (Kargo has not
	// reconciled it yet).
	Status *StageStatus
}

// StageStatus is the part of a Stage's status that kargo-latch reads.
type StageStatus struct {
	LastPromotion *PromotionReference
	// CurrentPromotion names the Promotion running now, if any.
	CurrentPromotion string
	// Health is status.health.status verbatim; empty when absent.
	Health string
	// FreightID is freightHistory[0].id; FreightNames are the names of the
	// Freight in that collection, sorted by origin.
	FreightID    string
	FreightNames []string
	// Verification is freightHistory[0].verificationHistory[0].
	Verification *VerificationInfo
	// Apps are the Argo CD Applications of status.health.output (see
	// appsFromOutput): only the four strings the latch reads, the repeated
	// ones shared; nil when there is no per-App data.
	Apps []latch.App
	// HealthOutputs is how many entries status.health.output has, read
	// with Apps: Kargo writes one only for a health check that returned
	// output (see PromotionReference.HealthChecks).
	HealthOutputs int
	// Holds are Kargo's own auto-promotion holds in force
	// (status.effectiveAutoPromotionHolds, Kargo v1.11.1+), sorted by
	// origin; nil when there are none (see holds.go).
	Holds []AutoPromotionHold
}

// PromotionReference is status.lastPromotion.
type PromotionReference struct {
	Name       string
	Phase      string
	FinishedAt *time.Time
	Freight    string
	// HealthChecks is how many health checks the promotion left for Kargo
	// to run (status.healthChecks).
	HealthChecks int
}

// VerificationInfo is one entry of a verificationHistory.
type VerificationInfo struct {
	ID      string
	Phase   string
	Message string
	// Run is analysisRun.name: the AnalysisRun Kargo follows for it.
	Run string
	// Actor is who started it, or aborted it.
	Actor string
}

// DeepCopyObject implements runtime.Object, so that the informer cache can
// hold Stages in this small form.
func (s *Stage) DeepCopyObject() runtime.Object { return s.DeepCopy() }

// DeepCopy returns a copy of s that shares no memory with it.
func (s *Stage) DeepCopy() *Stage {
	if s == nil {
		return nil
	}
	c := &Stage{TypeMeta: s.TypeMeta, State: s.State, HasVerification: s.HasVerification}
	s.ObjectMeta.DeepCopyInto(&c.ObjectMeta)
	if s.Status != nil {
		st := *s.Status
		st.FreightNames = append([]string(nil), s.Status.FreightNames...)
		if s.Status.LastPromotion != nil {
			lp := *s.Status.LastPromotion
			st.LastPromotion = &lp
		}
		st.Apps = slices.Clone(s.Status.Apps)
		st.Holds = slices.Clone(s.Status.Holds)
		if s.Status.Verification != nil {
			v := *s.Status.Verification
			st.Verification = &v
		}
		c.Status = &st
	}
	return c
}

// stageFromMap reads a Stage from its unstructured content. It never fails:
// a missing or mistyped field reads as absent.
func stageFromMap(obj map[string]any) *Stage {
	s := &Stage{
		TypeMeta:        metav1.TypeMeta{APIVersion: GroupVersion.String(), Kind: "Stage"},
		ObjectMeta:      metaFromMap(obj, ownKeys, stageValue),
		HasVerification: field(obj, "spec", "verification") != nil,
	}
	state := s.takeState()
	status, ok := field(obj, "status").(map[string]any)
	if !ok {
		return s
	}
	s.Status = statusFromMap(status, latch.ReadsApps(state))
	return s
}

// takeState moves the record annotation from Annotations into State, and
// returns its value.
func (s *Stage) takeState() string {
	value, ok := s.Annotations[StateAnnotation]
	if !ok {
		return ""
	}
	delete(s.Annotations, StateAnnotation)
	if len(s.Annotations) == 0 {
		s.Annotations = nil
	}
	s.State = Pack(value)
	return value
}

// StatusFromUnstructured reads the whole of what kargo-latch reads of a
// Stage's status, per-App health included whatever the latch phase (for
// people: the operator's mirror drops it once a cycle has latched); nil when
// the Stage has no status.
func StatusFromUnstructured(u *unstructured.Unstructured) *StageStatus {
	status, ok := u.Object["status"].(map[string]any)
	if !ok {
		return nil
	}
	return statusFromMap(status, true)
}

func statusFromMap(status map[string]any, withApps bool) *StageStatus {
	st := &StageStatus{
		CurrentPromotion: str(status, "currentPromotion", "name"),
		Health:           str(status, "health", "status"),
	}
	if withApps {
		output := field(status, "health", "output")
		st.Apps = appsFromOutput(output)
		if entries, ok := output.([]any); ok {
			st.HealthOutputs = len(entries)
		}
	}
	if lp, ok := status["lastPromotion"].(map[string]any); ok {
		st.LastPromotion = &PromotionReference{
			Name:       str(lp, "name"),
			Phase:      str(lp, "status", "phase"),
			FinishedAt: timeAt(lp, "finishedAt"),
			Freight:    str(lp, "freight", "name"),
		}
		if checks, ok := field(lp, "status", "healthChecks").([]any); ok {
			st.LastPromotion.HealthChecks = len(checks)
		}
	}
	if history, ok := status["freightHistory"].([]any); ok && len(history) > 0 {
		if newest, ok := history[0].(map[string]any); ok {
			st.FreightID = str(newest, "id")
			st.FreightNames = freightNames(newest)
			st.Verification = newestVerification(newest)
		}
	}
	st.Holds = holdsFromMap(status[HoldsField])
	return st
}

func freightNames(collection map[string]any) []string {
	items, ok := collection["items"].(map[string]any)
	if !ok {
		return nil
	}
	keys := make([]string, 0, len(items))
	for k := range items {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var names []string
	for _, k := range keys {
		if item, ok := items[k].(map[string]any); ok {
			if name := str(item, "name"); name != "" {
				names = append(names, name)
			}
		}
	}
	return names
}

func newestVerification(collection map[string]any) *VerificationInfo {
	history, ok := collection["verificationHistory"].([]any)
	if !ok || len(history) == 0 {
		return nil
	}
	v, ok := history[0].(map[string]any)
	if !ok {
		return nil
	}
	run, _ := v["analysisRun"].(map[string]any)
	return &VerificationInfo{ID: str(v, "id"), Phase: str(v, "phase"), Message: str(v, "message"), Run: str(run, "name"), Actor: str(v, "actor")}
}

// maxApps is how many Applications the mirror keeps: one more than the
// latch's bound, so that the latch can tell a Stage that lists too many.
const maxApps = latch.MaxApps + 1

// appsFromOutput reads the per-App health that Kargo's argocd-update check
// writes in status.health.output: an array with one object per health check,
// each {"applicationStatuses": [{"Name", "Namespace", "health": {"status"},
// "sync": {"status"}}, ...]}. The output is opaque in Kargo's API, so it is
// read tolerantly: any other shape (another health checker, a future Kargo)
// means "no per-App data", never an error.
func appsFromOutput(output any) []latch.App {
	checks, ok := output.([]any)
	if !ok || len(checks) == 0 {
		return nil
	}
	var apps []latch.App
	for _, c := range checks {
		check, ok := c.(map[string]any)
		if !ok {
			return nil
		}
		entries, ok := check["applicationStatuses"].([]any)
		if !ok {
			return nil
		}
		for _, e := range entries {
			app, ok := e.(map[string]any)
			if !ok {
				return nil
			}
			var named bool
			apps, named = appendApp(apps, firstString(app, "Name", "name"), firstString(app, "Namespace", "namespace"), str(app, "health", "status"), str(app, "sync", "status"))
			if !named {
				return nil
			}
		}
	}
	return apps
}

// appendApp appends one App of a health output to apps, up to maxApps,
// sharing the strings that repeat; named is false for an App without a
// name, which makes the whole output unusable.
func appendApp(apps []latch.App, name, namespace, health, sync string) (_ []latch.App, named bool) {
	if name == "" {
		return apps, false
	}
	if len(apps) < maxApps {
		apps = append(apps, latch.App{Name: name, Namespace: intern(namespace), Health: intern(health), Sync: intern(sync)})
	}
	return apps, true
}

// firstString is the first of keys that holds a non-empty string in obj:
// Kargo writes Name and Namespace capitalised (its Go struct has no JSON
// tags there).
func firstString(obj map[string]any, keys ...string) string {
	for _, k := range keys {
		if s, ok := obj[k].(string); ok && s != "" {
			return s
		}
	}
	return ""
}

// intern shares one copy of strings that repeat across Stages (health and
// sync states, the Argo CD namespace), so that 40 Apps on 10,000 Stages do
// not hold 400,000 copies of "Healthy".
func intern(s string) string { return unique.Make(s).Value() }

// ownKeys keeps kargo-latch's own labels and annotations, but for a kept
// garbage record, which nothing reads and which may be large.
func ownKeys(key string) bool {
	return strings.HasPrefix(key, OwnPrefix) && key != InvalidStateAnnotation || key == AbortAnnotation || key == ReverifyAnnotation
}

// maxTokenLen bounds what the mirror keeps of Kargo's request tokens on a
// Stage, so that no Stage can make the cache large.
const maxTokenLen = 1024

// stageValue is what the Stage mirror keeps of a kept label or annotation:
// kargo-latch's own whole; Kargo's request tokens as the id they name, read
// as Kargo reads them before they are cut to maxTokenLen.
func stageValue(key, value string) string {
	if !requestToken(key) {
		return value
	}
	id := RequestTokenID(value)
	return id[:min(len(id), maxTokenLen)]
}
