package kargo

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Since v1.11, a person who promotes Freight other than an origin's
// auto-promotion candidate (a rollback, the natural move in an incident)
// makes Kargo hold auto-promotion from that origin until someone promotes
// the candidate again. Kargo keeps the holds it honours in
// status.effectiveAutoPromotionHolds (v1.11.1+), which it recomputes on
// every pass of the Stage: the durable status.autoPromotionHolds, overlaid
// with the newest intent of a person's Promotion newer than lastPromotion
// (so a hold shows as soon as Kargo has seen the rollback's Promotion, and
// a release as soon as it has seen the candidate's). A hold made while
// kargo-latch pauses the Stage outlives the StagePause, so kargo-latch
// shows it wherever it speaks of a resume. It never writes one.

// HoldsField is where Kargo keeps the holds it honours, under status.
const HoldsField = "effectiveAutoPromotionHolds"

// The intent Kargo's webhook stamps on a person's Promotion when it is
// created (while auto-promotion is enabled), each valued with an origin key
// ("Warehouse/<name>"): a hold when the Freight is not the origin's
// auto-promotion candidate, a resume (the hold's release) when it is.
const (
	HoldIntentAnnotation   = "kargo.akuity.io/auto-promotion-hold"
	ResumeIntentAnnotation = "kargo.akuity.io/auto-promotion-resume"
)

// AutoPromotionHold is one of Kargo's own auto-promotion holds on a Stage:
// Kargo auto-promotes nothing from Origin while it lasts.
type AutoPromotionHold struct {
	// Origin is the map key, "Warehouse/<name>".
	Origin string
	// Freight is the Freight the hold was made with (freightName): what the
	// person promoted.
	Freight string
	// Promotion names the Promotion that made the hold, and Actor the
	// person who created it; either may be empty.
	Promotion string
	Actor     string
	// CreatedAt is when that Promotion was created; nil when not recorded.
	CreatedAt *time.Time
}

// Warehouse is the name of the Warehouse the hold's origin names; the whole
// origin for one of another kind, which Kargo does not define today.
func (h AutoPromotionHold) Warehouse() string {
	if name, ok := strings.CutPrefix(h.Origin, "Warehouse/"); ok {
		return name
	}
	return h.Origin
}

// Describe says what the hold is, in a line for people.
func (h AutoPromotionHold) Describe() string {
	s := h.Origin + " at Freight " + orUnknown(h.Freight)
	var by []string
	if h.Actor != "" {
		by = append(by, "by "+h.Actor)
	}
	if h.Promotion != "" {
		by = append(by, "promotion "+h.Promotion)
	}
	if h.CreatedAt != nil {
		by = append(by, "since "+h.CreatedAt.UTC().Format(time.RFC3339))
	}
	if len(by) > 0 {
		s += " (" + strings.Join(by, ", ") + ")"
	}
	return s
}

// HoldRelease says how a person releases Kargo's hold on a Stage of a
// project: promoting the origin's current candidate Freight makes Kargo
// drop the hold (the Promotion carries Kargo's resume intent), and Kargo's
// UI can resume auto-promotion too.
func HoldRelease(project, stage string) string {
	return fmt.Sprintf("promote the held Warehouse's current candidate Freight to the Stage (kargo promote --project %s --stage %s --freight NAME), or resume auto-promotion in Kargo's UI",
		project, stage)
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}

// holdsFromMap reads status.effectiveAutoPromotionHolds from a status map,
// sorted by origin; nil when it has none. An entry that is not an object is
// left out; a mistyped field reads as empty.
func holdsFromMap(v any) []AutoPromotionHold {
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	var out []AutoPromotionHold
	for _, origin := range sortedKeys(m) {
		h, ok := m[origin].(map[string]any)
		if !ok {
			continue
		}
		out = append(out, AutoPromotionHold{Origin: origin, Freight: str(h, "freightName"),
			Promotion: str(h, "promotionName"), Actor: str(h, "actor"), CreatedAt: timeAt(h, "createdAt")})
	}
	return out
}

// holdsDoc is status.effectiveAutoPromotionHolds for the Stage codec; it
// reads as holdsFromMap does.
type holdsDoc []AutoPromotionHold

func (d *holdsDoc) UnmarshalJSON(b []byte) error {
	var entries map[string]json.RawMessage
	if len(b) == 0 || b[0] != '{' || unmarshal(b, &entries) != nil {
		return nil
	}
	var out holdsDoc
	for _, origin := range sortedKeys(entries) {
		raw := entries[origin]
		if len(raw) == 0 || raw[0] != '{' {
			continue
		}
		var h struct {
			FreightName   string `json:"freightName"`
			PromotionName string `json:"promotionName"`
			Actor         string `json:"actor"`
			CreatedAt     string `json:"createdAt"`
		}
		if unmarshal(raw, &h) != nil {
			continue
		}
		out = append(out, AutoPromotionHold{Origin: origin, Freight: h.FreightName,
			Promotion: h.PromotionName, Actor: h.Actor, CreatedAt: parseTime(h.CreatedAt)})
	}
	*d = out
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
