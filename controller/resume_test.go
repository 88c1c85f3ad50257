package controller

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

const resumedText = "The last StagePause covering the Stage was deleted; Kargo was asked to refresh it and may auto-promote again"

// A person rolled back while the Stage was paused, so Kargo holds
// auto-promotion from that origin (status.effectiveAutoPromotionHolds):
// the StageResumed Event says so, how to release it, and names the hold.
// Without a hold it says what it always said.
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
			want: "Normal StageResumed " + resumedText + ". But Kargo itself still holds auto-promotion: to release it, " +
				"promote the held Warehouse's current candidate Freight to the Stage (kargo promote --project shop --stage prod --freight NAME), " +
				"or resume auto-promotion in Kargo's UI. Kargo's holds: " +
				"Warehouse/images at Freight f1 (by admin, promotion prod.01m.f1, since 2026-11-29T10:30:00Z)",
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

// Review finding L6: an Event's message is cut at a kilobyte. For a Stage
// whose name takes 253 characters, held from 20 origins, the Event still
// says how to release the holds, and names the first few of them.
func TestStageResumedEventKeepsTheReleaseForALongNameAndManyHolds(t *testing.T) {
	long := strings.Repeat("a", 253)
	holds := map[string]any{}
	for i := range 20 {
		name := fmt.Sprintf("warehouse-%02d-%s", i, strings.Repeat("w", 40))
		holds["Warehouse/"+name] = map[string]any{
			"freightName": strings.Repeat("f", 40), "origin": map[string]any{"kind": "Warehouse", "name": name},
			"promotionName": long + ".01jx0000000000000000000001.fffffff", "actor": "kubernetes:someone@example.com", "createdAt": "2026-11-29T10:30:00Z",
		}
	}
	stage, _ := pausedStage(time.Minute)
	stage.SetName(long)
	stage.Object["status"].(map[string]any)["effectiveAutoPromotionHolds"] = holds
	f := newFixtureWith(t, false, nil, stage)
	got := f.waitEvent("Normal StageResumed")
	release := "(kargo promote --project shop --stage " + long + " --freight NAME), or resume auto-promotion in Kargo's UI"
	if !strings.Contains(got, release) {
		t.Errorf("the Event lost how to release the holds:\n%s", got)
	}
	if !strings.Contains(got, "Kargo's holds: Warehouse/warehouse-00-") {
		t.Errorf("the Event names no hold:\n%s", got)
	}
}
