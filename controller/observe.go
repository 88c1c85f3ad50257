package controller

import (
	"strings"

	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// observe turns a mirrored Stage into the latch's view of it. A health
// string Kargo does not define reads as Unknown and is marked invalid, so
// that it neither latches nor fails the Stage; it is returned in unknown so
// that it can be reported.
func observe(s *kargo.Stage, previous latch.Health) (obs latch.Observation, unknown string) {
	obs.Stage, obs.PreviousHealth = s.Name, previous
	// The mirror keeps Kargo's request tokens as the ids they name.
	obs.AbortRequested = s.Annotations[kargo.AbortAnnotation]
	obs.Reverify = s.Annotations[kargo.ReverifyAnnotation] != ""
	st := s.Status
	if st == nil {
		return obs, ""
	}
	obs.PromotionRunning = st.CurrentPromotion != ""
	obs.Health = latch.Health(st.Health)
	if st.Health != "" && !kargo.KnownHealth(st.Health) {
		obs.Health, obs.HealthInvalid, unknown = latch.HealthUnknown, true, st.Health
	}
	obs.FreightID = st.FreightID
	obs.Freight = strings.Join(st.FreightNames, ",")
	obs.FreightNames = st.FreightNames
	obs.HasVerification = s.HasVerification
	obs.Apps, obs.HealthOutputs = st.Apps, st.HealthOutputs
	if lp := st.LastPromotion; lp != nil && lp.Name != "" {
		obs.LastPromotion = &latch.Promotion{
			Name:       lp.Name,
			Phase:      latch.PromotionPhase(lp.Phase),
			FinishedAt: lp.FinishedAt,
			Freight:    lp.Freight,
		}
		obs.HealthChecks = lp.HealthChecks
	}
	obs.Verification = verificationOf(st.Verification)
	return obs, unknown
}

// verificationOf is the latch's view of Kargo's current verification.
func verificationOf(v *kargo.VerificationInfo) *latch.Verification {
	if v == nil {
		return nil
	}
	return &latch.Verification{ID: v.ID, Phase: latch.VerificationPhase(v.Phase), Message: v.Message, Run: v.Run, Actor: v.Actor}
}
