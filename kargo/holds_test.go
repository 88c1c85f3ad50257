package kargo

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// A Stage that Kargo holds, as its Stage controller writes it after a
// person rolled back (kargo-api-facts.md §6, §11.5): the durable hold, and
// its mirror in the effective holds, which are what Kargo honours. A hold
// the durable map keeps and the effective one does not (a resume Promotion
// newer than the last one) no longer stops anything.
const heldStage = `{"kind": "Stage", "metadata": {"name": "prod", "namespace": "shop"},
	"status": {
		"autoPromotionHolds": {
			"Warehouse/images": {"freightName": "f1", "origin": {"kind": "Warehouse", "name": "images"}, "promotionName": "prod.01m.f1", "actor": "admin", "createdAt": "2026-12-01T10:00:00Z"},
			"Warehouse/charts": {"freightName": "c1", "origin": {"kind": "Warehouse", "name": "charts"}, "promotionName": "prod.01k.c1", "actor": "admin", "createdAt": "2026-12-01T09:00:00Z"}},
		"effectiveAutoPromotionHolds": {
			"Warehouse/images": {"freightName": "f1", "origin": {"kind": "Warehouse", "name": "images"}, "promotionName": "prod.01m.f1", "actor": "admin", "createdAt": "2026-12-01T10:00:00Z"}}}}`

func TestTheMirrorKeepsKargosEffectiveHolds(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	want := []AutoPromotionHold{{Origin: "Warehouse/images", Freight: "f1", Promotion: "prod.01m.f1", Actor: "admin", CreatedAt: &at}}
	maps, _ := viaMaps([]byte(heldStage))
	for via, s := range map[string]*Stage{"the maps": maps, "the codec": viaDocs(t, []byte(heldStage))} {
		if diff := cmp.Diff(want, s.Status.Holds); diff != "" {
			t.Errorf("holds read via %s (-want +got):\n%s", via, diff)
		}
		// The cache's copies share nothing with what they copy.
		c := s.DeepCopy()
		c.Status.Holds[0].Freight = "changed"
		if s.Status.Holds[0].Freight != "f1" {
			t.Errorf("a deep copy's hold changed the original's (via %s)", via)
		}
	}
}

func TestHoldDescription(t *testing.T) {
	at := time.Date(2026, 12, 1, 10, 0, 0, 0, time.FixedZone("CET", 3600))
	for name, c := range map[string]struct {
		hold            AutoPromotionHold
		describe, wname string
	}{
		"as Kargo writes it": {
			hold:     AutoPromotionHold{Origin: "Warehouse/images", Freight: "f1", Promotion: "prod.01m.f1", Actor: "admin", CreatedAt: &at},
			describe: "Warehouse/images at Freight f1 (by admin, promotion prod.01m.f1, since 2026-12-01T09:00:00Z)",
			wname:    "images",
		},
		"only what the schema requires": {
			hold:     AutoPromotionHold{Origin: "Warehouse/images", Freight: "f1"},
			describe: "Warehouse/images at Freight f1", wname: "images",
		},
		"no Freight": {
			hold:     AutoPromotionHold{Origin: "Warehouse/images"},
			describe: "Warehouse/images at Freight (unknown)", wname: "images",
		},
		"an origin of another kind": {
			hold:     AutoPromotionHold{Origin: "Bucket/b", Freight: "f1"},
			describe: "Bucket/b at Freight f1", wname: "Bucket/b",
		},
	} {
		t.Run(name, func(t *testing.T) {
			if got := c.hold.Describe(); got != c.describe {
				t.Errorf("Describe() = %q, want %q", got, c.describe)
			}
			if got := c.hold.Warehouse(); got != c.wname {
				t.Errorf("Warehouse() = %q, want %q", got, c.wname)
			}
		})
	}
	if got, want := HoldRelease("shop", "prod"), "promote the held Warehouse's current candidate Freight to the Stage (kargo promote --project shop --stage prod --freight NAME), or resume auto-promotion in Kargo's UI"; got != want {
		t.Errorf("HoldRelease = %q, want %q", got, want)
	}
}
