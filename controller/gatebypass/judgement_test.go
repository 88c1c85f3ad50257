package gatebypass

import (
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kargo-latch/kargo-latch/api"
	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
)

func TestCoveringAt(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	pause := func(name, stage string, created time.Time, deleting bool) *v1alpha1.StagePause {
		p := &v1alpha1.StagePause{Spec: v1alpha1.StagePauseSpec{Stage: stage}}
		p.Name, p.CreationTimestamp = name, metav1.NewTime(created)
		if deleting {
			now := metav1.NewTime(at)
			p.DeletionTimestamp = &now
		}
		return p
	}
	promo := &kargo.Promotion{Stage: "prod"}
	promo.CreationTimestamp = metav1.NewTime(at)
	for _, tc := range []struct {
		name  string
		pause *v1alpha1.StagePause
		want  bool
	}{
		{"the Stage's, before", pause("a", "prod", at.Add(-Margin), false), true},
		{"the Stage's, within the margin", pause("a", "prod", at.Add(-Margin+time.Second), false), false},
		{"project-wide, before", pause("a", "*", at.Add(-time.Hour), false), true},
		{"the same second", pause("a", "prod", at, false), false},
		{"after", pause("a", "prod", at.Add(time.Second), false), false},
		{"another Stage", pause("a", "dev", at.Add(-time.Minute), false), false},
		{"being deleted", pause("a", "prod", at.Add(-time.Minute), true), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := len(coveringAt([]*v1alpha1.StagePause{tc.pause}, promo)) > 0; got != tc.want {
				t.Errorf("covered = %v, want %v", got, tc.want)
			}
		})
	}
}

// The covering pauses come sorted by name, as every replica then names the
// same ones, in the same order, in its Warning.
func TestCoveringAtSortsByName(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	var pauses []*v1alpha1.StagePause
	for _, name := range []string{"c", "a", "b"} {
		p := &v1alpha1.StagePause{Spec: v1alpha1.StagePauseSpec{Stage: "*"}}
		p.Name, p.CreationTimestamp = name, metav1.NewTime(at.Add(-time.Hour))
		pauses = append(pauses, p)
	}
	promo := &kargo.Promotion{Stage: "prod"}
	promo.CreationTimestamp = metav1.NewTime(at)
	var names []string
	for _, sp := range coveringAt(pauses, promo) {
		names = append(names, sp.Name)
	}
	if want := []string{"a", "b", "c"}; !slices.Equal(names, want) {
		t.Errorf("covering %v, want %v", names, want)
	}
}

func TestBypassCandidate(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	promo := func(actor string, age time.Duration) *kargo.Promotion {
		p := &kargo.Promotion{Stage: "prod"}
		p.CreationTimestamp = metav1.NewTime(now.Add(-age))
		if actor != "" {
			p.Annotations = map[string]string{kargo.CreateActorAnnotation: actor}
		}
		return p
	}
	noStage := promo("", time.Second)
	noStage.Stage = ""
	for _, tc := range []struct {
		name string
		p    *kargo.Promotion
		want bool
	}{
		{"no actor", promo("", time.Second), true},
		{"a controller", promo("controller:kargo-controller", time.Second), true},
		{"a person", promo("kubernetes:dev", time.Second), false},
		{"a Kargo controller Kargo's webhook took for a person", promo("kubernetes:kargo-shard-eu", time.Second), true},
		{"Kargo's API for a person", promo("admin", time.Second), false},
		{"older than its Event lives", promo("", Horizon+time.Second), false},
		{"no Stage", noStage, false},
		{"no creation time", &kargo.Promotion{Stage: "prod"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := candidate(tc.p, now, isShard); got != tc.want {
				t.Errorf("candidate = %v, want %v", got, tc.want)
			}
		})
	}
}

// isShard: the operator's setting names kargo-shard-eu as one of Kargo's
// controllers.
func isShard(user string) bool { return user == "kargo-shard-eu" }

// TestGateBypassMessage: the Warning names the Promotion, the pauses, who
// created it, and what to check: an auto-promotion's shape is refused
// whoever creates it, so the gate itself; without the API server's stamp, it
// says the username is unknown and how to turn the stamp on. A Promotion of
// one of Kargo's controllers with a kubernetes: actor names that user and
// Kargo's setting to widen. Many pauses, long names, a 900-character
// username: it stays within an Event's 1024 characters, the advice whole.
func TestGateBypassMessage(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	pause := func(name string) *v1alpha1.StagePause {
		return &v1alpha1.StagePause{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.StagePauseSpec{Stage: "prod"}}
	}
	promo := func(name, requester string) *kargo.Promotion {
		p := &kargo.Promotion{Stage: "prod"}
		p.Name, p.CreationTimestamp = name, metav1.NewTime(at)
		if requester != "" {
			p.Annotations = map[string]string{api.RequestedByAnnotation: requester}
		}
		return p
	}
	stamped := promo("prod.01j.def", "")
	stamped.Annotations = map[string]string{kargo.CreateActorAnnotation: "kubernetes:kargo-shard-eu"}
	gateAdvice := []string{"The gate refuses every Promotion without a create-actor, or with a controller: one, whoever creates it",
		"check that the pause gate's ValidatingAdmissionPolicy and binding (kargo-latch-pause-gate in a default install) are installed"}
	long := strings.Repeat("x", 240)
	many := []*v1alpha1.StagePause{pause("a" + long), pause("b" + long), pause("c"), pause("d"), pause("e")}
	for _, tc := range []struct {
		name   string
		p      *kargo.Promotion
		pauses []*v1alpha1.StagePause
		want   []string
	}{
		{"stamped", promo("prod.01j.abc", "kargo-shard-eu"), []*v1alpha1.StagePause{pause("hold")},
			append([]string{"Auto-promotion prod.01j.abc, created at 2026-12-01T10:00:00Z by kargo-shard-eu,", "StagePause hold (reason Manual)"}, gateAdvice...)},
		{"not stamped", promo("prod.01j.abc", ""), []*v1alpha1.StagePause{pause("hold")},
			append([]string{"by an unknown user", "no " + api.RequestedByAnnotation, "turn on the requester mark", "pauseGate.requestedBy.enabled", "components/requested-by", "1.36"}, gateAdvice...)},
		{"a Kargo controller taken for a person", stamped, []*v1alpha1.StagePause{pause("hold")},
			[]string{"Auto-promotion prod.01j.def, created at 2026-12-01T10:00:00Z by Kargo controller kargo-shard-eu,", "StagePause hold (reason Manual)",
				"create-actor kubernetes:kargo-shard-eu", "webhooksServer.controlplaneUserRegex (CONTROLPLANE_USER_REGEX) to match kargo-shard-eu"}},
		{"many pauses", promo("prod.01j.abc", "kargo-shard-eu"), []*v1alpha1.StagePause{pause("a"), pause("b"), pause("c"), pause("d"), pause("e")},
			[]string{"StagePause a (reason Manual), b (reason Manual), c (reason Manual), and 2 more covered"}},
		{"many pauses, long names", promo("prod."+long, "system:serviceaccount:"+long[:100]), many,
			[]string{"by system:serviceaccount:" + long[:100] + ","}},
		{"a 900-character username", promo("prod."+long, strings.Repeat("u", 900)), many,
			[]string{"by " + strings.Repeat("u", maxRequesterShown) + "…,"}},
		{"not stamped, long names", promo("prod."+long, ""), many, []string{"by an unknown user"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			msg := message(tc.p, tc.pauses, isShard)
			if len(msg) > 1024 {
				t.Errorf("message of %d characters, over an Event's 1024: %q", len(msg), msg)
			}
			for _, want := range append(tc.want, "Runbook KargoLatchGateBypassed") {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q does not say %q", msg, want)
				}
			}
		})
	}
}
