package controller

import (
	"testing"
	"time"
)

const resumedText = "The last StagePause covering the Stage was deleted; Kargo was asked to refresh it and may auto-promote again"

// A person rolled back while the Stage was paused, so Kargo holds
// auto-promotion from that origin (status.effectiveAutoPromotionHolds):
// the StageResumed Event says so, names the hold, and says how to release
// it. Without a hold it says what it always said.
func TestStageResumedEventNamesKargosHold(t *testing.T) {
	for name, c := range map[string]struct {
		holds map[string]any
		want  string
	}{
		"no hold": {want: "Normal StageResumed " + resumedText},
		"a hold from a rollback": {
			holds: map[string]any{"Warehouse/images": map[string]any{
				"freightName": "f1", "origin": map[string]any{"kind": "Warehouse", "name": "images"},
				"promotionName": "prod.01m.f1", "actor": "admin", "createdAt": "2026-11-29T10:30:00Z",
			}},
			want: "Normal StageResumed " + resumedText + ". But Kargo itself still holds auto-promotion from " +
				"Warehouse/images at Freight f1 (by admin, promotion prod.01m.f1, since 2026-11-29T10:30:00Z): to release it, " +
				"promote the held Warehouse's current candidate Freight to the Stage (kargo promote --project shop --stage prod --freight NAME), " +
				"or resume auto-promotion in Kargo's UI",
		},
	} {
		t.Run(name, func(t *testing.T) {
			stage, _ := pausedStage(time.Minute) // its pause deleted meanwhile
			if c.holds != nil {
				stage.Object["status"].(map[string]any)["effectiveAutoPromotionHolds"] = c.holds
			}
			f := newFixtureWith(t, false, nil, stage)
			if got := f.waitEvent("Normal StageResumed"); got != c.want {
				t.Errorf("Event %q,\nwant  %q", got, c.want)
			}
		})
	}
}
