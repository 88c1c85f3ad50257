package latch

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Phase is where a Stage is in its latch cycle. The pause is not a phase: a
// Stage can be Latched and paused.
type Phase string

// The phases of the contract.
const (
	PhaseIdle     Phase = "Idle"
	PhasePromoted Phase = "Promoted"
	PhaseLatched  Phase = "Latched"
	PhaseDegraded Phase = "Degraded"
	PhaseFailed   Phase = "Failed"
)

// Phases lists every phase, in cycle order, for one-hot metrics and tables.
var Phases = []Phase{PhaseIdle, PhasePromoted, PhaseLatched, PhaseDegraded, PhaseFailed}

// FailureReason says why a cycle failed. It becomes a StagePause's reason.
type FailureReason string

// The failure reasons of the contract.
const (
	ReasonPromotionFailed    FailureReason = "PromotionFailed"
	ReasonPromotionErrored   FailureReason = "PromotionErrored"
	ReasonVerificationFailed FailureReason = "VerificationFailed"
	ReasonVerificationError  FailureReason = "VerificationError"
	// ReasonVerificationInconclusive: kargo-latch's run of the configured
	// analysis could not decide (verify-on-latch).
	ReasonVerificationInconclusive FailureReason = "VerificationInconclusive"
	ReasonDegraded                 FailureReason = "Degraded"
	ReasonLatchDeadlineExceeded    FailureReason = "LatchDeadlineExceeded"
)

// What formed a latch (Record.LatchedBy).
const (
	LatchedByStage = "Stage"
	LatchedByApps  = "Applications"
)

// HistoryLimit is how many verification records a Record keeps, like Kargo's
// own verificationHistory.
const HistoryLimit = 10

// Actor is the actor kargo-latch writes into its verification records.
const Actor = "kargo-latch"

// Record is the durable latch record, stored as JSON in the Stage annotation
// kargo-latch.io/state. A restarted operator resumes from it alone.
type Record struct {
	// Promotion and Freight name the promotion whose cycle this is. Promotion
	// is empty when the cycle began with a Freight change whose promotion
	// Kargo did not report as lastPromotion (its replay-order quirk).
	Promotion string `json:"promotion,omitempty"`
	Freight   string `json:"freight,omitempty"`
	// FreightID is the freightHistory[0].id the cycle belongs to.
	FreightID string `json:"freightID,omitempty"`
	Phase     Phase  `json:"phase"`

	PromotedAt *time.Time `json:"promotedAt,omitempty"`
	// AdoptedAt is set when the operator first saw this cycle after it had
	// begun (a first install, or a lost record). Deadlines then count from
	// here, so that nothing fails for time the operator did not watch.
	AdoptedAt *time.Time `json:"adoptedAt,omitempty"`
	// ResumedAt is the last resume of a cycle not yet latched: the latch
	// deadline holds while a pause covers the Stage (a drain leaves Kargo
	// health-blind until the next promotion), and counts again from here.
	ResumedAt     *time.Time `json:"resumedAt,omitempty"`
	LatchedAt     *time.Time `json:"latchedAt,omitempty"`
	DegradedSince *time.Time `json:"degradedSince,omitempty"`
	Failure       *Failure   `json:"failure,omitempty"`

	// LatchedBy says what formed the latch: LatchedByStage or
	// LatchedByApps.
	LatchedBy string `json:"latchedBy,omitempty"`
	// AppsHealthy holds, for this cycle, each Application ("namespace/name")
	// seen Healthy and Synced while health was judged, with the first time.
	AppsHealthy map[string]time.Time `json:"appsHealthy,omitempty"`
	// AppsRecovered is AppsHealthy for a Degraded cycle: the Applications
	// seen Healthy and Synced since degradedSince.
	AppsRecovered map[string]time.Time `json:"appsRecovered,omitempty"`
	// Marked names the Freight of this cycle that are verified in the
	// Stage: marked by kargo-latch, or found already verified.
	Marked []string `json:"marked,omitempty"`

	// Pauses names the StagePauses that cover the Stage now, and PausedBy
	// the one that made it paused (announced with ActionPaused); PausedBy is
	// nil while the Stage is not paused.
	Pauses   []string   `json:"pauses,omitempty"`
	PausedBy *PauseMark `json:"pausedBy,omitempty"`

	// ExaminedPromotion is the last lastPromotion name judged, and
	// ExaminedVerification the last terminal verification ID judged, so that
	// nothing is judged twice.
	ExaminedPromotion    string `json:"examinedPromotion,omitempty"`
	ExaminedVerification string `json:"examinedVerification,omitempty"`

	// Analysis is the cycle's configured verification (an AnalysisRun),
	// apart from the latch's verdict on health (Verification).
	Analysis *Analysis `json:"analysis,omitempty"`
	// KargosRuns names kargo-latch's runs of earlier cycles that Kargo had
	// adopted: they are Kargo's, and kargo-latch never cuts them short
	// (newest first, at most MaxKargosRuns).
	KargosRuns []string `json:"kargosRuns,omitempty"`

	// Verification is the latch's verdict on the cycle's health (a latch,
	// or a failure), never an analysis; History holds the
	// newest HistoryLimit records of all cycles, newest first.
	Verification *VerificationRecord  `json:"verification,omitempty"`
	History      []VerificationRecord `json:"history,omitempty"`
}

// Failure is why, and when, a cycle failed.
type Failure struct {
	Reason  FailureReason `json:"reason"`
	Message string        `json:"message,omitempty"`
	At      time.Time     `json:"at"`
	// Pause names the StagePause this failure created, if any.
	Pause string `json:"pause,omitempty"`
}

// VerificationRecord mirrors Kargo's VerificationInfo for kargo-latch's own
// judgement of a cycle.
type VerificationRecord struct {
	ID         string            `json:"id"`
	Actor      string            `json:"actor"`
	StartTime  time.Time         `json:"startTime"`
	FinishTime time.Time         `json:"finishTime"`
	Phase      VerificationPhase `json:"phase"`
	Message    string            `json:"message,omitempty"`
}

// ReadsApps reports whether the machine may read per-Application health for
// a Stage whose record is encoded: only a cycle still waiting for its latch,
// or a degraded one waiting to recover, does (and a Stage without a usable
// record, which starts one). The Stage mirror keeps the Apps of only such
// Stages, so that thousands of latched Stages with dozens of Apps each cost
// no memory for them.
func ReadsApps(encoded string) bool {
	var r struct {
		Phase Phase `json:"phase"`
	}
	if encoded == "" || json.Unmarshal([]byte(encoded), &r) != nil {
		return true
	}
	return r.Phase == PhasePromoted || r.Phase == PhaseDegraded || !slices.Contains(Phases, r.Phase)
}

// Cycle identifies r's latch cycle: its Freight collection and promotion.
func (r Record) Cycle() string { return r.FreightID + "/" + r.Promotion }

// IsZero reports whether r is "no record".
func (r Record) IsZero() bool { return r.Phase == "" }

// RecordVersion is the version of the record this code writes. A record
// without one is version 1. A newer record was written by a newer kargo-latch
// (an upgrade rolled back, two versions side by side): this one leaves it
// alone rather than take it for garbage and overwrite it.
const RecordVersion = 1

// versioned is how a record is encoded: its fields, and the version.
type versioned struct {
	Version int `json:"version"`
	Record
}

// NewerVersionError is Decode's error for a record of a version newer than
// RecordVersion.
type NewerVersionError struct{ Version int }

func (e *NewerVersionError) Error() string {
	return fmt.Sprintf("state is a version %d record, newer than this kargo-latch knows (%d)", e.Version, RecordVersion)
}

// Encode returns the annotation value for r. The encoding is canonical, so
// comparing encodings tells whether anything changed.
func (r Record) Encode() string {
	b, err := json.Marshal(versioned{Version: RecordVersion, Record: r})
	if err != nil {
		// Only strings, times and slices of them: this cannot fail.
		panic(fmt.Sprintf("latch: encoding record: %v", err))
	}
	return string(b)
}

// currentPrefix starts every record this version encodes (the version is
// the first field of the canonical encoding).
var currentPrefix = fmt.Sprintf(`{"version":%d,`, RecordVersion)

// NewerVersion reports, without a full decode for the records this version
// writes, whether value is a record of a newer version.
func NewerVersion(value string) *NewerVersionError {
	if value == "" || strings.HasPrefix(value, currentPrefix) {
		return nil
	}
	var newer *NewerVersionError
	if _, err := Decode(value); errors.As(err, &newer) {
		return newer
	}
	return nil
}

// Decode parses an annotation value. An empty value is the zero Record. A
// record of a newer version is a *NewerVersionError, to be left alone. Any
// other value that is not a well-formed record is an error; callers treat it
// as no record and start over from the Stage's status.
func Decode(value string) (Record, error) {
	if value == "" {
		return Record{}, nil
	}
	var v versioned
	if err := json.Unmarshal([]byte(value), &v); err != nil {
		var head struct {
			Version int `json:"version"`
		}
		if json.Unmarshal([]byte(value), &head) == nil && head.Version > RecordVersion {
			return Record{}, &NewerVersionError{Version: head.Version}
		}
		return Record{}, fmt.Errorf("state is not a latch record: %w", err)
	}
	if v.Version > RecordVersion {
		return Record{}, &NewerVersionError{Version: v.Version}
	}
	if err := v.Record.validate(); err != nil {
		return Record{}, err
	}
	return v.Record, nil
}

func (r *Record) validate() error {
	if !slices.Contains(Phases, r.Phase) {
		return fmt.Errorf("state has unknown phase %q", r.Phase)
	}
	if (r.Phase == PhaseFailed) != (r.Failure != nil) {
		return fmt.Errorf("state phase %s does not match its failure", r.Phase)
	}
	if r.Phase == PhaseDegraded && r.DegradedSince == nil {
		return fmt.Errorf("state is Degraded without degradedSince")
	}
	if (r.Phase == PhasePromoted || r.Phase == PhaseLatched || r.Phase == PhaseDegraded) && r.PromotedAt == nil {
		return fmt.Errorf("state phase %s has no promotedAt", r.Phase)
	}
	if len(r.AppsHealthy) > MaxApps {
		return fmt.Errorf("state lists %d Applications, more than %d", len(r.AppsHealthy), MaxApps)
	}
	if len(r.AppsRecovered) > MaxApps {
		return fmt.Errorf("state lists %d recovered Applications, more than %d", len(r.AppsRecovered), MaxApps)
	}
	if len(r.Marked) > MaxApps {
		return fmt.Errorf("state lists %d marked Freight, more than %d", len(r.Marked), MaxApps)
	}
	if len(r.History) > HistoryLimit {
		return fmt.Errorf("state history has %d records, more than %d", len(r.History), HistoryLimit)
	}
	return nil
}

// clone returns a copy of r that shares no memory with it.
func (r *Record) clone() Record {
	c := *r
	c.Pauses = slices.Clone(r.Pauses)
	c.History = slices.Clone(r.History)
	c.Marked = slices.Clone(r.Marked)
	c.KargosRuns = slices.Clone(r.KargosRuns)
	c.AppsHealthy = maps.Clone(r.AppsHealthy)
	c.AppsRecovered = maps.Clone(r.AppsRecovered)
	if r.Verification != nil {
		v := *r.Verification
		c.Verification = &v
	}
	if r.Analysis != nil {
		a := *r.Analysis
		c.Analysis = &a
	}
	if r.Failure != nil {
		f := *r.Failure
		c.Failure = &f
	}
	if r.PausedBy != nil {
		p := *r.PausedBy
		c.PausedBy = &p
	}
	return c
}

// PauseMark names the StagePause that made a Stage paused, by name and UID
// (a pause deleted and made again under its name is another pause), and
// when the operator saw it take effect.
type PauseMark struct {
	Name string    `json:"name"`
	UID  string    `json:"uid,omitempty"`
	At   time.Time `json:"at"`
}
