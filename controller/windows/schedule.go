package windows

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

const (
	// maxOccurrencesBeforeHorizon bounds the occurrences walked from dtstart
	// to the horizon (rrule-go cannot start anywhere else). An hourly window
	// whose dtstart is 20 years back passes; a FREQ=MINUTELY one from a year
	// ago does not.
	maxOccurrencesBeforeHorizon = 200_000
	// resolutionSlack: reading local times in a zone (instant) can put an
	// occurrence in a clock gap before the one just ahead of it in local
	// time, by at most the gap (one hour, or a whole day when Samoa crossed
	// the date line). Expansion looks this far past the horizon so that no
	// occurrence is missed for coming out of order.
	resolutionSlack = 26 * time.Hour
)

// Occurrence is one interval [Start, End) during which a window is active.
type Occurrence struct {
	Start, End time.Time
}

// ClosureKind says why a Stage is closed.
type ClosureKind string

// The reasons a Stage is closed.
const (
	// ClosedByDeny: a Deny window is active (whatever the Allow windows say).
	ClosedByDeny ClosureKind = "Deny"
	// ClosedOutsideAllow: Allow windows match the Stage and none is active.
	ClosedOutsideAllow ClosureKind = "OutsideAllow"
)

// Interval is a time during which a Stage is closed: [From, Until).
type Interval struct {
	From, Until time.Time
	// Kind is ClosedByDeny if a Deny window is active at any time in the
	// interval, else ClosedOutsideAllow.
	Kind ClosureKind
	// Windows names every window responsible at some time in the interval:
	// the active Deny windows, and the Allow windows when none of them is
	// active. In the order the windows were given, without repeats.
	Windows []string
	// OpensAt is when the Stage next opens: Until, unless the interval runs
	// to the end of the horizon, where the next open is not known (a
	// one-shot Allow window that has passed never opens again) and OpensAt
	// is zero. Kargo's own status leaves nextOpen out in the same case.
	OpensAt time.Time
}

// Reason says why a Stage is closed at one instant.
type Reason struct {
	Kind    ClosureKind
	Windows []string
}

// Occurrences returns the window's occurrences that overlap [from, until),
// in order of start, unclipped. Occurrences that began before from and are
// still active at from are included. It fails, with an error wrapping
// ErrTooDense, when more than maxOccurrences overlap the horizon, or when
// reaching the horizon from dtstart means walking more than 200,000 of them.
func (c *Compiled) Occurrences(from, until time.Time, maxOccurrences int) ([]Occurrence, error) {
	if occurrences, err, ok := c.last.get(from, until, maxOccurrences); ok {
		return slices.Clone(occurrences), err
	}
	occurrences, err := c.occurrences(from, until, maxOccurrences)
	c.last.put(from, until, maxOccurrences, occurrences, err)
	return slices.Clone(occurrences), err
}

func (c *Compiled) occurrences(from, until time.Time, maxOccurrences int) ([]Occurrence, error) {
	var out []Occurrence
	var tooMany bool
	err := c.expand(from, until, func(o Occurrence) bool {
		if len(out) == maxOccurrences {
			tooMany = true
			return false
		}
		out = append(out, o)
		return true
	})
	if err == nil && tooMany {
		err = &WindowError{Window: c.Name, Field: "rrule", Err: fmt.Errorf(
			"%w: more than %d between %s and %s", ErrTooDense, maxOccurrences,
			from.UTC().Format(time.RFC3339), until.UTC().Format(time.RFC3339))}
	}
	if err != nil {
		return nil, err
	}
	// Reading local times in a zone can swap two starts around a clock gap.
	slices.SortStableFunc(out, func(a, b Occurrence) int { return a.Start.Compare(b.Start) })
	return out, nil
}

// expand calls visit with each occurrence overlapping [from, until) until
// visit returns false.
func (c *Compiled) expand(from, until time.Time, visit func(Occurrence) bool) (err error) {
	if c.rule == nil {
		start := c.start.at()
		if c.end.After(from) && start.Before(until) {
			visit(Occurrence{Start: start, End: c.end})
		}
		return nil
	}
	defer recoverInto(&err)
	next, err := c.rule.iterator()
	if err != nil {
		return &WindowError{Window: c.Name, Field: "rrule", Err: err}
	}
	walked := 0
	for {
		wall, ok := next()
		if !ok {
			return nil
		}
		start := instant(wall, c.start.loc)
		if !start.Before(until.Add(resolutionSlack)) {
			return nil
		}
		if !c.rule.until.IsZero() && start.After(c.rule.until) {
			// UNTIL is inclusive (§3.3.10); later starts may still come
			// out of order, within the slack.
			if start.After(c.rule.until.Add(resolutionSlack)) {
				return nil
			}
			continue
		}
		end := start.Add(c.duration)
		if !end.After(from) {
			if walked++; walked > maxOccurrencesBeforeHorizon {
				return &WindowError{Window: c.Name, Field: "rrule", Err: fmt.Errorf(
					"%w: more than %d from dtstart to %s; move dtstart closer",
					ErrTooDense, maxOccurrencesBeforeHorizon, from.UTC().Format(time.RFC3339))}
			}
			continue
		}
		if !start.Before(until) {
			continue
		}
		if !visit(Occurrence{Start: start, End: end}) {
			return nil
		}
	}
}

// activeAt reports whether an occurrence of the window covers t.
func (c *Compiled) activeAt(t time.Time) (bool, error) {
	if occurrences, ok := c.last.covering(t); ok {
		for _, o := range occurrences {
			if !t.Before(o.Start) && t.Before(o.End) {
				return true, nil
			}
		}
		return false, nil
	}
	active := false
	err := c.expand(t, t.Add(time.Nanosecond), func(Occurrence) bool {
		active = true
		return false
	})
	return active, err
}

// Schedule returns the intervals within [from, until) during which a Stage
// is closed, given the windows that match it (MatchingWindows), by Kargo's
// semantics: closed while any Deny window is active, or while at least one
// Allow window matches and none is active. Closures that touch or overlap
// are merged into one interval, which names all the windows responsible.
// Intervals are clipped to the horizon and their times are in UTC.
//
// A window that cannot be expanded (more than maxOccurrences in the
// horizon, or too many before it) is left out, and the intervals are those
// of the other windows, as if it were absent; the error joins one
// *WindowError per window left out (WindowErrors), so that the caller can
// warn about exactly those.
func Schedule(windows []*Compiled, from, until time.Time, maxOccurrences int) ([]Interval, error) {
	if maxOccurrences <= 0 {
		return nil, fmt.Errorf("maxOccurrences must be positive, not %d", maxOccurrences)
	}
	from, until = from.UTC(), until.UTC()
	if !from.Before(until) {
		return nil, nil
	}
	type edge struct {
		at     time.Time
		window int
		delta  int
	}
	var edges []edge
	var errs []error
	usable := make([]bool, len(windows))
	for i, w := range windows {
		occurrences, err := w.Occurrences(from, until, maxOccurrences)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		usable[i] = true
		for _, o := range occurrences {
			edges = append(edges, edge{latest(o.Start, from), i, +1}, edge{earliest(o.End, until), i, -1})
		}
	}
	slices.SortStableFunc(edges, func(a, b edge) int { return a.at.Compare(b.at) })

	var out []Interval
	var open *Interval                  // the closure being built
	var responsible []bool              // its windows, by index
	counts := make([]int, len(windows)) // occurrences of each window active now
	active := make([]bool, len(windows))
	finish := func() {
		if open == nil {
			return
		}
		open.Windows = names(windows, responsible)
		if open.Until.Before(until) {
			open.OpensAt = open.Until
		}
		out = append(out, *open)
		open = nil
	}
	next := 0
	for at := from; at.Before(until); {
		for next < len(edges) && !edges[next].at.After(at) {
			counts[edges[next].window] += edges[next].delta
			next++
		}
		segmentEnd := until
		if next < len(edges) && edges[next].at.Before(until) {
			segmentEnd = edges[next].at
		}
		for i, n := range counts {
			active[i] = n > 0
		}
		closed, kind, by := closedBy(windows, usable, active)
		switch {
		case !closed:
			finish()
		case open == nil:
			open = &Interval{From: at, Until: segmentEnd, Kind: kind}
			responsible = make([]bool, len(windows))
		default:
			open.Until = segmentEnd
			if kind == ClosedByDeny {
				open.Kind = ClosedByDeny
			}
		}
		for _, i := range by {
			responsible[i] = true
		}
		at = segmentEnd
	}
	finish()
	return out, errors.Join(errs...)
}

// ActiveAt reports whether a Stage with these matching windows is closed at
// t, and why. Like Schedule, it leaves out a window it cannot expand and
// reports it in the error.
func ActiveAt(windows []*Compiled, t time.Time) (closed bool, reason Reason, err error) {
	var errs []error
	usable := make([]bool, len(windows))
	active := make([]bool, len(windows))
	for i, w := range windows {
		a, err := w.activeAt(t)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		usable[i], active[i] = true, a
	}
	closed, kind, by := closedBy(windows, usable, active)
	if !closed {
		return false, Reason{}, errors.Join(errs...)
	}
	responsible := make([]bool, len(windows))
	for _, i := range by {
		responsible[i] = true
	}
	return true, Reason{Kind: kind, Windows: names(windows, responsible)}, errors.Join(errs...)
}

// closedBy applies Kargo's rule to the usable windows, given which are
// active: closed if a Deny window is active, or if there are Allow windows
// and none is active. It returns the indices of the windows responsible.
func closedBy(windows []*Compiled, usable, active []bool) (bool, ClosureKind, []int) {
	var denying, allows []int
	allowActive := false
	for i, w := range windows {
		if !usable[i] {
			continue
		}
		switch w.Kind {
		case KindDeny:
			if active[i] {
				denying = append(denying, i)
			}
		case KindAllow:
			allows = append(allows, i)
			allowActive = allowActive || active[i]
		}
	}
	outsideAllow := len(allows) > 0 && !allowActive
	switch {
	case len(denying) > 0 && outsideAllow:
		return true, ClosedByDeny, append(denying, allows...)
	case len(denying) > 0:
		return true, ClosedByDeny, denying
	case outsideAllow:
		return true, ClosedOutsideAllow, allows
	}
	return false, "", nil
}

// names lists the names of the windows marked, in order, without repeats.
func names(windows []*Compiled, marked []bool) []string {
	var out []string
	for i, w := range windows {
		if marked[i] && !slices.Contains(out, w.Name) {
			out = append(out, w.Name)
		}
	}
	return out
}

func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a.UTC()
	}
	return b.UTC()
}

func earliest(a, b time.Time) time.Time {
	if a.Before(b) {
		return a.UTC()
	}
	return b.UTC()
}
