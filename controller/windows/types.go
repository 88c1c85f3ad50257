package windows

import (
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Kind says whether a window allows or denies promotions while it is active
// (Kargo's PromotionWindowKind; the CRD's enum is exactly Allow and Deny).
type Kind string

// The two kinds of window.
const (
	// KindAllow: when any Allow window matches a Stage, the Stage is open
	// only while at least one of them is active.
	KindAllow Kind = "Allow"
	// KindDeny: an active Deny window closes the Stage, whatever the Allow
	// windows say.
	KindDeny Kind = "Deny"
)

// Window mirrors Kargo's PromotionWindow (api/v1alpha1/
// promotion_window_types.go on Kargo main, the CRDs at 1c764767a), field for
// field and with the same JSON names, so that a window reads exactly as the
// user wrote it for Kargo Enterprise.
type Window struct {
	// Name is unique within its list and names the window in refusals and
	// Events.
	Name string `json:"name"`
	// StageSelector selects the Stages the window applies to; nil means every
	// Stage in scope (the Project, or the cluster).
	StageSelector *Selector `json:"stageSelector,omitempty"`
	// ProjectSelector selects the Projects a ClusterConfig window applies to;
	// nil means every Project. Kargo rejects it on ProjectConfig windows.
	ProjectSelector *Selector `json:"projectSelector,omitempty"`
	// Kind is Allow or Deny.
	Kind Kind `json:"kind"`
	// RRule is an RFC 5545 recurrence rule such as "FREQ=WEEKLY;BYDAY=SA";
	// without one the window is a single interval [DTStart, DTEnd).
	RRule string `json:"rrule,omitempty"`
	// DTStart is an iCal date-time with an optional "TZID=<IANA zone>:"
	// prefix, e.g. "TZID=Europe/Berlin:20260101T090000".
	DTStart string `json:"dtstart,omitempty"`
	// DTEnd is the end in the same format; with an RRule, DTEnd - DTStart is
	// each occurrence's length.
	DTEnd string `json:"dtend,omitempty"`
}

// Selector mirrors Kargo's PromotionPolicySelector: a name (exact, or a
// pattern prefixed "glob:", "regex:" or "regexp:") ANDed with a label
// selector whose fields are inlined, as in Kargo (`*metav1.LabelSelector`
// with `json:",inline"`): the YAML has matchLabels and matchExpressions
// beside name, not under a labelSelector key.
type Selector struct {
	// Name is an exact name, or a pattern with a "glob:", "regex:" or
	// "regexp:" prefix.
	Name string `json:"name,omitempty"`
	// LabelSelector is nil when neither matchLabels nor matchExpressions is
	// set, and then selects everything, as in Kargo.
	*metav1.LabelSelector `json:",inline"`
}

// StageRef is what matching a window needs to know about a Stage.
type StageRef struct {
	// Project is the Stage's namespace, which is its Project's name.
	Project string
	// Name is the Stage's name.
	Name string
	// Labels are the Stage's labels.
	Labels map[string]string
	// ProjectLabels are the labels of the Stage's Project resource
	// (kargo.akuity.io Project, cluster-scoped, named like the namespace),
	// read by ClusterConfig windows' projectSelector.
	ProjectLabels map[string]string
}

// ErrTooDense is wrapped by the error for a window that has more
// occurrences than the caller allows, in the horizon or before it.
var ErrTooDense = errors.New("too many occurrences")

// ErrDisabled is wrapped by ParseWindow's error for a window marked
// `disabled: true`. The field is not in Kargo's API at 1c764767a (its CRD
// prunes it), but Kargo's UI on main already writes it: such a window must
// not be enforced, and being refused as unparsable is exactly that.
var ErrDisabled = errors.New("the window is disabled")

// WindowError is a problem with one window, named with the field at fault,
// in words fit for a Warning Event on the ProjectConfig or ClusterConfig.
type WindowError struct {
	// Window is the window's name ("" if it has none, or the list index as
	// "#3" when parsing could not read the name).
	Window string
	// Field is the field at fault, as a path inside the window
	// ("dtstart", "stageSelector.name", ...).
	Field string
	// Err is the cause.
	Err error
}

func (e *WindowError) Error() string {
	return fmt.Sprintf("promotion window %q: %s: %v", e.Window, e.Field, e.Err)
}

func (e *WindowError) Unwrap() error { return e.Err }

// WindowErrors lists every *WindowError in err, which may join several
// (Compile reports all the problems of a window at once, Schedule every
// window it had to leave out).
func WindowErrors(err error) []*WindowError {
	var out []*WindowError
	var walk func(error)
	walk = func(err error) {
		var we *WindowError
		switch e := err.(type) { //nolint:errorlint // walking the tree itself
		case nil:
		case *WindowError:
			out = append(out, e)
		case interface{ Unwrap() []error }:
			for _, inner := range e.Unwrap() {
				walk(inner)
			}
		default:
			if errors.As(err, &we) {
				out = append(out, we)
			}
		}
	}
	walk(err)
	return out
}
