package windows

import (
	"errors"
	"fmt"
	"strings"
	"time"

	// The image has no zoneinfo: the IANA database is embedded, so that
	// TZID=Europe/Berlin means the same in every build and every cluster.
	_ "time/tzdata"
)

// The forms of an iCal DATE-TIME (RFC 5545 §3.3.5) and of a DATE (§3.3.4).
const (
	icalLocal = "20060102T150405"
	icalUTC   = "20060102T150405Z"
	icalDate  = "20060102"
)

// Years outside this range are refused. Before 1900 zones carry local mean
// time offsets of odd seconds, and year 1 at midnight is Go's zero time,
// which the recurrence library reads as "now".
const (
	minYear = 1900
	maxYear = 9999
)

// dateTime is a parsed dtstart or dtend: the wall-clock time as written
// (its fields, held in UTC, which has no gaps and no repeats, so that
// recurrences can be expanded in local time) and the zone it is read in.
type dateTime struct {
	wall time.Time
	loc  *time.Location
}

// at is the instant the date-time names.
func (d dateTime) at() time.Time { return instant(d.wall, d.loc) }

// parseDateTime reads dtstart or dtend as Kargo documents them: an iCal
// date-time with an optional "TZID=<IANA zone>:" prefix. It accepts the
// three forms of §3.3.5 (floating "20260101T090000", UTC
// "20260101T090000Z", and "TZID=Europe/Berlin:20260101T090000") and, as the
// recurrence libraries Kargo's UI and kargo-latch use both do, a DATE
// ("20260101", midnight). A floating time is read as UTC: a server has no
// "local time of the attendee" to read it in.
func parseDateTime(s string) (dateTime, error) {
	s = strings.TrimSpace(s)
	loc := time.UTC
	zoned := false
	if len(s) >= len("TZID=") && strings.EqualFold(s[:len("TZID=")], "TZID=") {
		// An IANA name has no colon; the value after the last one is the
		// time.
		i := strings.LastIndex(s, ":")
		if i < 0 {
			return dateTime{}, fmt.Errorf("%q: a TZID needs a time after a colon (TZID=Europe/Berlin:20260101T090000)", s)
		}
		name := s[len("TZID="):i]
		var err error
		if loc, err = loadZone(name); err != nil {
			return dateTime{}, err
		}
		s, zoned = s[i+1:], true
	}
	value := strings.ToUpper(s)
	var wall time.Time
	var err error
	switch len(value) {
	case len(icalDate):
		wall, err = time.Parse(icalDate, value)
	case len(icalLocal):
		wall, err = time.Parse(icalLocal, value)
	case len(icalUTC):
		if zoned {
			// §3.3.5: TZID must not be applied to a UTC time; which of the
			// two was meant cannot be known.
			return dateTime{}, fmt.Errorf("%q: a UTC time (ending in Z) cannot have a TZID", s)
		}
		wall, err = time.Parse(icalUTC, value)
	default:
		err = errors.New("not an iCal date-time")
	}
	if err != nil {
		return dateTime{}, fmt.Errorf("%q is not an iCal date-time (20260101T090000, 20260101T090000Z or TZID=Europe/Berlin:20260101T090000): %w", s, err)
	}
	if y := wall.Year(); y < minYear || y > maxYear {
		return dateTime{}, fmt.Errorf("%q: year %d is outside %d-%d", s, y, minYear, maxYear)
	}
	return dateTime{wall: wall, loc: loc}, nil
}

// loadZone loads an IANA zone. "Local" is refused: it would mean the
// operator's own zone, which differs from one cluster to the next.
func loadZone(name string) (*time.Location, error) {
	if name == "" || strings.EqualFold(name, "Local") {
		return nil, fmt.Errorf("TZID %q is not an IANA time zone", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("TZID %q is not an IANA time zone: %w", name, err)
	}
	return loc, nil
}

// instant reads a wall-clock time in loc as RFC 5545 §3.3.5 does: a time
// that occurs twice (when the clocks go back) is the first of the two; a
// time that does not occur (when they go forward) is read with the UTC
// offset before the gap. time.Date leaves both cases unspecified, and its
// choice does differ between zones east and west of UTC.
func instant(wall time.Time, loc *time.Location) time.Time {
	if loc == time.UTC {
		return wall
	}
	y, mo, d := wall.Date()
	h, mi, s := wall.Clock()
	// The offsets in force at the same wall time the day before and the day
	// after: the offsets on either side of any transition near this time
	// (zones never change offset on two days running).
	_, before := time.Date(y, mo, d-1, h, mi, s, 0, loc).Zone()
	_, after := time.Date(y, mo, d+1, h, mi, s, 0, loc).Zone()
	wallSeconds := wall.Unix()
	var first time.Time
	for _, offset := range []int{before, after} {
		candidate := time.Unix(wallSeconds-int64(offset), 0).UTC()
		if _, got := candidate.In(loc).Zone(); got != offset {
			continue // this offset is not in force at that instant
		}
		if first.IsZero() || candidate.Before(first) {
			first = candidate
		}
	}
	if first.IsZero() {
		// A gap: no instant has this wall time.
		first = time.Unix(wallSeconds-int64(before), 0).UTC()
	}
	return first
}
