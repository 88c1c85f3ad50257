package cli

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kargo-latch/kargo-latch/api/v1alpha1"
	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// Promotion names as Kargo gives them: <stage>.<ULID>.<freight>, in the
// order Kargo runs them.
const (
	promo1 = "prod.01jx0000000000000000000001.aaaaaaa"
	promo2 = "prod.01jx0000000000000000000002.bbbbbbb"
	promo3 = "prod.01jx0000000000000000000003.ccccccc"
)

// kargoView is the part of a Stage's status Kargo writes that wait reads.
type kargoView struct {
	current   string // status.currentPromotion.name
	last      string // status.lastPromotion.name
	lastPhase string
	lastFreight,
	freightID string // freightHistory[0].id
	freight []string // freightHistory[0]'s Freight
	apps    map[string]any
	holds   map[string]any // status.effectiveAutoPromotionHolds
}

// prodStage is the Stage project/prod as the API server returns it.
func prodStage(view kargoView, rec latch.Record) *unstructured.Unstructured {
	status := map[string]any{}
	if view.current != "" {
		status["currentPromotion"] = map[string]any{"name": view.current}
	}
	if view.last != "" {
		status["lastPromotion"] = map[string]any{"name": view.last, "freight": map[string]any{"name": view.lastFreight},
			"status": map[string]any{"phase": view.lastPhase}}
	}
	if view.freightID != "" {
		items := map[string]any{}
		for _, f := range view.freight {
			items["Warehouse/"+f] = map[string]any{"name": f}
		}
		status["freightHistory"] = []any{map[string]any{"id": view.freightID, "items": items}}
	}
	if view.apps != nil {
		status["health"] = view.apps
	}
	if view.holds != nil {
		status["effectiveAutoPromotionHolds"] = view.holds
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": kargo.GroupVersion.String(), "kind": "Stage",
		"metadata": map[string]any{"name": "prod", "namespace": "project"},
		"status":   status,
	}}
	if !rec.IsZero() {
		u.SetAnnotations(map[string]string{kargo.StateAnnotation: rec.Encode()})
	}
	return u
}

// cycleOf is a valid record of promotion's cycle in phase, on Freight
// collection "fc-<promotion>", changed by edit.
func cycleOf(promotion string, phase latch.Phase, edit func(*latch.Record)) latch.Record {
	r := latch.Record{Promotion: promotion, FreightID: "fc-" + promotion, Phase: phase, PromotedAt: ago(10 * time.Minute)}
	switch phase {
	case latch.PhaseLatched:
		r.LatchedAt = ago(5 * time.Minute)
	case latch.PhaseDegraded:
		r.LatchedAt, r.DegradedSince = ago(5*time.Minute), ago(time.Minute)
	case latch.PhaseFailed:
		r.Failure = &latch.Failure{Reason: latch.ReasonLatchDeadlineExceeded, Message: "Stage was not Healthy within 30m0s of promotion " + promotion, At: now}
	}
	if edit != nil {
		edit(&r)
	}
	return r
}

func TestJudgeLatched(t *testing.T) {
	latched1 := cycleOf(promo1, latch.PhaseLatched, nil)
	for name, c := range map[string]struct {
		target    string
		view      kargoView
		rec       latch.Record
		promotion *promotion
		want      outcome
		message   string
	}{
		"the current cycle latched": {
			rec: latched1, want: reached, message: "the current cycle (promotion " + promo1 + ") latched at",
		},
		"the current cycle failed": {
			rec: cycleOf(promo1, latch.PhaseFailed, nil), want: failed,
			message: "the current cycle (promotion " + promo1 + ") failed: LatchDeadlineExceeded: Stage was not Healthy within 30m0s",
		},
		"no promotion yet": {
			rec: latch.Record{Phase: latch.PhaseIdle}, want: waiting, message: "no promotion yet",
		},
		"no record yet": {
			want: waiting, message: "no promotion yet",
		},
		// A pipeline waits right after promoting: the Stage still shows the
		// previous cycle Latched.
		"the target is still Pending, the previous cycle Latched": {
			target: promo2, rec: latched1, promotion: &promotion{Name: promo2, Stage: "prod"},
			want: waiting, message: "promotion " + promo2 + " is Pending",
		},
		"the target runs, the previous cycle Latched": {
			target: promo2, rec: latched1, view: kargoView{current: promo2, last: promo1, lastPhase: promotionSucceeded},
			want: waiting, message: "promotion " + promo2 + " is Running",
		},
		"the target succeeded, kargo-latch has not started its cycle yet": {
			target: promo2, rec: latched1, view: kargoView{last: promo2, lastPhase: promotionSucceeded},
			want: waiting, message: "promotion " + promo2 + " succeeded; waiting for kargo-latch to start its cycle",
		},
		"the target's cycle waits for the latch": {
			target: promo2, view: kargoView{last: promo2, lastPhase: promotionSucceeded,
				apps: driver.AppsHealth("Progressing", driver.App{Name: "front", Health: "Healthy"}, driver.App{Name: "back", Health: "Progressing"})},
			rec: cycleOf(promo2, latch.PhasePromoted, func(r *latch.Record) {
				r.AppsHealthy = map[string]time.Time{"argocd/front": now}
			}),
			want: waiting, message: "the cycle of promotion " + promo2 + " is Promoted, waiting for the latch (1/2 Applications seen Healthy)",
		},
		"the target's cycle latched": {
			target: promo2, rec: cycleOf(promo2, latch.PhaseLatched, nil),
			want: reached, message: "the cycle of promotion " + promo2 + " latched at " + ago(5*time.Minute).Format(time.RFC3339),
		},
		"the target's cycle is Degraded: it may recover": {
			target: promo2, rec: cycleOf(promo2, latch.PhaseDegraded, nil),
			want: waiting, message: "is Degraded at",
		},
		"the target's cycle failed": {
			target: promo2, rec: cycleOf(promo2, latch.PhaseFailed, nil),
			want: failed, message: "the cycle of promotion " + promo2 + " failed: LatchDeadlineExceeded",
		},
		"the target failed, as the Stage shows": {
			target: promo2, view: kargoView{last: promo2, lastPhase: promotionFailed},
			rec:  cycleOf(promo1, latch.PhaseFailed, func(r *latch.Record) { r.Failure.Reason = latch.ReasonPromotionFailed }),
			want: failed, message: "promotion " + promo2 + " Failed",
		},
		"the target errored, as the Promotion shows first": {
			target: promo2, rec: latched1, view: kargoView{current: promo2},
			promotion: &promotion{Name: promo2, Stage: "prod", Phase: promotionErrored, Message: "connection refused"},
			want:      failed, message: "promotion " + promo2 + " Errored: connection refused",
		},
		"the target was aborted": {
			target: promo2, rec: latched1, promotion: &promotion{Name: promo2, Stage: "prod", Phase: promotionAborted},
			want: failed, message: "promotion " + promo2 + " was aborted",
		},
		"a newer promotion's cycle replaced the target's": {
			target: promo2, rec: cycleOf(promo3, latch.PhasePromoted, nil), view: kargoView{last: promo3, lastPhase: promotionSucceeded},
			want: failed, message: "the newer promotion " + promo3 + " has started its own",
		},
		"a cycle begun by a Freight change holds the target's Freight": {
			target: promo2, promotion: &promotion{Name: promo2, Stage: "prod", Freight: "f2", Phase: promotionSucceeded},
			rec:  cycleOf("", latch.PhaseLatched, func(r *latch.Record) { r.Freight = "f2" }),
			want: reached, message: "the cycle of promotion " + promo2 + " latched",
		},
		"a cycle begun by a Freight change holds other Freight": {
			target: promo2, promotion: &promotion{Name: promo2, Stage: "prod", Freight: "f2", Phase: promotionRunning},
			rec:  cycleOf("", latch.PhaseLatched, func(r *latch.Record) { r.Freight = "f1" }),
			want: waiting, message: "promotion " + promo2 + " is Running",
		},
	} {
		t.Run(name, func(t *testing.T) {
			v := judge(forLatched, c.target, sighting{stage: prodStage(c.view, c.rec), promotion: c.promotion})
			if v.outcome != c.want || !strings.Contains(v.message, c.message) {
				t.Errorf("judge = %v %q, want %v containing %q", v.outcome, v.message, c.want, c.message)
			}
		})
	}
}

func TestJudgeVerified(t *testing.T) {
	current := kargoView{last: promo2, lastPhase: promotionSucceeded, freightID: "fc-" + promo2, freight: []string{"f2"}}
	// cycleOf's cycles were promoted 10 minutes ago.
	verifiedByKargo := func(at *time.Time) func(string) (*time.Time, bool) {
		return func(f string) (*time.Time, bool) { return at, f == "f2" }
	}
	notVerified := func(string) (*time.Time, bool) { return nil, false }
	for name, c := range map[string]struct {
		view       kargoView
		rec        latch.Record
		verifiedIn func(string) (*time.Time, bool)
		want       outcome
		message    string
	}{
		"marked by kargo-latch": {
			view: current, rec: cycleOf(promo2, latch.PhaseLatched, func(r *latch.Record) { r.Marked = []string{"f2"} }),
			want: reached, message: "Freight f2 is verified in the Stage (marked by kargo-latch",
		},
		"verified by Kargo": {
			view: current, rec: cycleOf(promo2, latch.PhaseLatched, nil), verifiedIn: verifiedByKargo(ago(4 * time.Minute)),
			want: reached, message: "Freight f2 is verified in the Stage",
		},
		"latched, not verified": {
			view: current, rec: cycleOf(promo2, latch.PhaseLatched, nil), verifiedIn: notVerified,
			want: waiting, message: "its Freight is not verified in the Stage yet",
		},
		"latched, Freight not readable": {
			view: current, rec: cycleOf(promo2, latch.PhaseLatched, nil),
			want: waiting, message: "not verified in the Stage yet",
		},
		// Right after the promotion, freightHistory[0] may still hold the
		// previous Freight, verified long ago.
		"Kargo still shows the previous Freight": {
			view: kargoView{last: promo2, lastPhase: promotionSucceeded, freightID: "fc-" + promo1, freight: []string{"f1"}},
			rec:  cycleOf(promo2, latch.PhasePromoted, nil), verifiedIn: verifiedByKargo(ago(time.Minute)),
			want: waiting, message: "Promoted, waiting for the latch",
		},
		// A rollback to Freight that an earlier cycle verified: its mark
		// stays, whatever the Stage's health now.
		"rolled back to Freight verified in an earlier cycle, not latched": {
			view: current, rec: cycleOf(promo2, latch.PhasePromoted, nil), verifiedIn: verifiedByKargo(ago(time.Hour)),
			want: waiting, message: "the cycle of promotion " + promo2 + " is Promoted, waiting for the latch; " +
				"Freight f2 was verified in the Stage before this cycle's promotion, which counts once the cycle latches",
		},
		"rolled back to Freight verified in an earlier cycle, latched": {
			view: current, rec: cycleOf(promo2, latch.PhaseLatched, nil), verifiedIn: verifiedByKargo(ago(time.Hour)),
			want: reached, message: "Freight f2 is verified in the Stage",
		},
		"rolled back, latched, then Degraded": {
			view: current, rec: cycleOf(promo2, latch.PhaseDegraded, nil), verifiedIn: verifiedByKargo(ago(time.Hour)),
			want: reached, message: "Freight f2 is verified in the Stage",
		},
		"verified by Kargo after this cycle's promotion, before the latch": {
			view: current, rec: cycleOf(promo2, latch.PhasePromoted, nil), verifiedIn: verifiedByKargo(ago(9 * time.Minute)),
			want: reached, message: "Freight f2 is verified in the Stage",
		},
		"verified in the second of the promotion": {
			view: current, rec: cycleOf(promo2, latch.PhasePromoted, func(r *latch.Record) { r.PromotedAt = ptr(now.Add(300 * time.Millisecond)) }),
			verifiedIn: verifiedByKargo(&now), want: reached, message: "Freight f2 is verified in the Stage",
		},
		"verified without a time, not latched": {
			view: current, rec: cycleOf(promo2, latch.PhasePromoted, nil), verifiedIn: verifiedByKargo(nil),
			want: waiting, message: "Promoted, waiting for the latch",
		},
		"the cycle failed": {
			view: current, rec: cycleOf(promo2, latch.PhaseFailed, nil), verifiedIn: verifiedByKargo(ago(time.Minute)),
			want: failed, message: "failed: LatchDeadlineExceeded",
		},
	} {
		t.Run(name, func(t *testing.T) {
			v := judge(forVerified, promo2, sighting{stage: prodStage(c.view, c.rec), verifiedIn: c.verifiedIn})
			if v.outcome != c.want || !strings.Contains(v.message, c.message) {
				t.Errorf("judge = %v %q, want %v containing %q", v.outcome, v.message, c.want, c.message)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func stagePause(name, stage string, deleting bool) v1alpha1.StagePause {
	p := v1alpha1.StagePause{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "project"},
		Spec:       v1alpha1.StagePauseSpec{Stage: stage, Reason: "Incident"},
	}
	if deleting {
		p.DeletionTimestamp = &metav1.Time{Time: now}
	}
	return p
}

func TestJudgePaused(t *testing.T) {
	for name, c := range map[string]struct {
		pauses          []v1alpha1.StagePause
		paused, resumed outcome
		message         string
	}{
		"no pause":               {paused: waiting, resumed: reached, message: "the Stage is not paused"},
		"its own pause":          {pauses: []v1alpha1.StagePause{stagePause("inc-1", "prod", false)}, paused: reached, resumed: waiting, message: "paused by StagePause inc-1 (reason Incident)"},
		"the project-wide pause": {pauses: []v1alpha1.StagePause{stagePause("all", v1alpha1.AllStages, false)}, paused: reached, resumed: waiting, message: "StagePause all"},
		"another Stage's pause":  {pauses: []v1alpha1.StagePause{stagePause("inc-1", "test", false)}, paused: waiting, resumed: reached, message: "not paused"},
		"a pause being deleted":  {pauses: []v1alpha1.StagePause{stagePause("inc-1", "prod", true)}, paused: waiting, resumed: reached, message: "not paused"},
	} {
		t.Run(name, func(t *testing.T) {
			s := sighting{stage: prodStage(kargoView{}, latch.Record{}), pauses: c.pauses}
			for cond, want := range map[condition]outcome{forPaused: c.paused, forResumed: c.resumed} {
				if v := judge(cond, "", s); v.outcome != want || !strings.Contains(v.message, c.message) {
					t.Errorf("%s: judge = %v %q, want %v containing %q", cond, v.outcome, v.message, want, c.message)
				}
			}
		})
	}
}

// rollbackHold is the hold Kargo makes when admin rolls Warehouse/images
// back to Freight f1.
var rollbackHold = map[string]any{"Warehouse/images": map[string]any{
	"freightName": "f1", "origin": map[string]any{"kind": "Warehouse", "name": "images"},
	"promotionName": promo1, "actor": "admin", "createdAt": "2026-11-30T07:50:00Z",
}}

// A person rolled back during the pause, so Kargo holds auto-promotion
// itself: once no StagePause covers the Stage, a wait for resumed ends at
// once (exit 4) naming the hold and how to release it; while paused, it
// waits and mentions the hold; a wait for paused does not care.
func TestJudgeResumedWhileKargoHolds(t *testing.T) {
	const hold = "Kargo itself still holds auto-promotion from Warehouse/images at Freight f1 (by admin, promotion " + promo1 +
		", since 2026-11-30T07:50:00Z): to release it, promote the held Warehouse's current candidate Freight to the Stage " +
		"(kargo promote --project project --stage prod --freight NAME), or resume auto-promotion in Kargo's UI"
	heldStage := prodStage(kargoView{holds: rollbackHold}, latch.Record{})
	pauses := []v1alpha1.StagePause{stagePause("inc-1", "prod", false)}
	for name, c := range map[string]struct {
		cond    condition
		pauses  []v1alpha1.StagePause
		want    outcome
		message string
	}{
		"resumed, held":      {cond: forResumed, want: held, message: "the Stage is not paused, but " + hold},
		"still paused, held": {cond: forResumed, pauses: pauses, want: waiting, message: "the Stage is paused by StagePause inc-1 (reason Incident); " + hold},
		"paused, held":       {cond: forPaused, pauses: pauses, want: reached, message: "the Stage is paused by StagePause inc-1 (reason Incident)"},
	} {
		t.Run(name, func(t *testing.T) {
			if v := judge(c.cond, "", sighting{stage: heldStage, pauses: c.pauses}); v.outcome != c.want || v.message != c.message {
				t.Errorf("judge = %v %q,\nwant %v %q", v.outcome, v.message, c.want, c.message)
			}
		})
	}
	// An empty map: nothing is held.
	if v := judge(forResumed, "", sighting{stage: prodStage(kargoView{holds: map[string]any{}}, latch.Record{})}); v.outcome != reached {
		t.Errorf("no hold: judge = %v %q, want reached", v.outcome, v.message)
	}
}

func TestJudgeStageDeleted(t *testing.T) {
	for _, cond := range []condition{forLatched, forVerified, forPaused, forResumed} {
		if v := judge(cond, promo1, sighting{}); v.outcome != failed || v.message != "the Stage was deleted" {
			t.Errorf("%s: judge = %v %q, want failed: the Stage was deleted", cond, v.outcome, v.message)
		}
	}
}

// The promotion an unpinned wait waits for is the newest the Stage has:
// right after "kargo promote", a Pending Promotion the Stage does not show
// yet.
func TestCurrentPromotion(t *testing.T) {
	latched1 := cycleOf(promo1, latch.PhaseLatched, nil)
	for name, c := range map[string]struct {
		view       kargoView
		rec        latch.Record
		promotions []promotion
		want       string
	}{
		"none":                 {},
		"the record's":         {rec: latched1, view: kargoView{last: promo1, lastPhase: promotionSucceeded}, want: promo1},
		"a Pending Promotion":  {rec: latched1, promotions: []promotion{{Name: promo1, Stage: "prod", Phase: promotionSucceeded}, {Name: promo2, Stage: "prod"}}, want: promo2},
		"the running one":      {rec: latched1, view: kargoView{current: promo2}, want: promo2},
		"the last one, failed": {rec: latched1, view: kargoView{last: promo2, lastPhase: promotionFailed}, want: promo2},
		"not an aborted one":   {rec: latched1, view: kargoView{last: promo3, lastPhase: promotionAborted}, promotions: []promotion{{Name: promo2, Stage: "prod", Phase: promotionAborted}}, want: promo1},
		"not another Stage's":  {rec: latched1, promotions: []promotion{{Name: "test.01jx0000000000000000000009.fffffff", Stage: "test"}}, want: promo1},
	} {
		t.Run(name, func(t *testing.T) {
			if got := currentPromotion("prod", prodStage(c.view, c.rec), c.promotions); got != c.want {
				t.Errorf("currentPromotion = %q, want %q", got, c.want)
			}
		})
	}
}
