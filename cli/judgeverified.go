package cli

import (
	"fmt"
	"strings"
	"time"

	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/latch"
)

// judgeVerifiedCycle judges a wait for verified of a cycle that has not
// failed. The Freight must be verified in the Stage in this cycle
// (judgeVerified). With verify-on-latch, the cycle's analysis must also
// have passed, kargo-latch's run or Kargo's own: a latch is never a passed
// analysis. Any Stage's analysis that ends Failed, Error or Inconclusive
// ends the wait: the Freight will not be verified in this cycle.
func judgeVerifiedCycle(name string, rec latch.Record, st *kargo.StageStatus, a *AnalysisStatus, verifiedIn func(string) (*time.Time, bool)) verdict {
	v, state := judgeVerified(rec, st, verifiedIn)
	gated := a != nil && a.VerifyOnLatch
	switch {
	case state == verifiedNow && !gated:
		return verdict{reached, v}
	case state == verifiedNow && a.succeeded():
		return verdict{reached, fmt.Sprintf("%s, and its analysis passed: %s", v, a.sentence())}
	case a.failed():
		return verdict{analysisFailed, fmt.Sprintf("%s: its verification did not pass: %s", name, a.sentence())}
	}
	where := fmt.Sprintf("%s is %s", name, progress(rec, st))
	if state == verifiedNow && gated {
		// Verified in an earlier cycle, say: this one's analysis counts.
		where = fmt.Sprintf("%s is %s; %s, but this cycle's analysis has not passed", name, rec.Phase, v)
	}
	if state == verifiedBefore {
		where += "; " + v
	}
	if a != nil {
		where += "; " + a.sentence()
		if a.aborted() {
			where += "; the Freight is verified only by a new verification (reverify it in Kargo)"
		}
	}
	return verdict{waiting, where}
}

// analysisFailure reports whether the cycle failed because its configured
// verification did not pass.
func analysisFailure(f *latch.Failure) bool {
	if f == nil {
		return false
	}
	switch f.Reason {
	case latch.ReasonVerificationFailed, latch.ReasonVerificationError, latch.ReasonVerificationInconclusive:
		return true
	}
	return false
}

// judgeVerified reports whether the cycle's Freight is verified in the
// Stage in this cycle: marked by kargo-latch (the record; it marks only a
// latched cycle), or verified by Kargo (each Freight's status.verifiedIn)
// once the cycle has latched, or at or after its promotion. Only the
// cycle's own Freight counts: right after a promotion, freightHistory[0]
// may still be the previous one's. And a verifiedIn entry stays for good:
// Freight rolled back to keeps the mark of the cycle that verified it
// long ago, whatever its health now.
func judgeVerified(rec latch.Record, st *kargo.StageStatus, verifiedIn func(string) (*time.Time, bool)) (string, verifiedState) {
	if st.FreightID == "" || st.FreightID != rec.FreightID || len(st.FreightNames) == 0 {
		return "", notVerified
	}
	freight := strings.Join(st.FreightNames, ", ")
	if markedVerified(st.FreightNames, &rec) {
		return fmt.Sprintf("Freight %s is verified in the Stage (marked by kargo-latch when the cycle latched)", freight), verifiedNow
	}
	if verifiedIn == nil {
		return "", notVerified
	}
	state := verifiedNow
	for _, f := range st.FreightNames {
		at, ok := verifiedIn(f)
		switch {
		case !ok:
			return "", notVerified
		case rec.LatchedAt == nil && !notBefore(at, rec.PromotedAt):
			state = verifiedBefore
		}
	}
	if state == verifiedBefore {
		return fmt.Sprintf("Freight %s was verified in the Stage before this cycle's promotion, which counts once the cycle latches", freight), state
	}
	return fmt.Sprintf("Freight %s is verified in the Stage", freight), state
}

// verifiedState is where the cycle's Freight stands for a wait for verified.
type verifiedState int

const (
	notVerified verifiedState = iota
	// verifiedBefore: verified in the Stage, but before this cycle's
	// promotion, and the cycle has not latched.
	verifiedBefore
	verifiedNow
)

// notBefore reports whether Kargo's verifiedAt is not older than the
// cycle's promotion, to the second Kargo writes.
func notBefore(verifiedAt, promotedAt *time.Time) bool {
	return verifiedAt != nil && promotedAt != nil && !verifiedAt.Before(promotedAt.Truncate(time.Second))
}
