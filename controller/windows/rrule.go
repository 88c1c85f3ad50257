package windows

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/teambition/rrule-go"
)

// Bounds on a rule, so that expanding one costs little and ends. Real
// freeze windows are far inside them.
const (
	// maxInterval keeps INTERVAL arithmetic far from overflow.
	maxInterval = 1_000_000
	// maxByValues bounds each BYxxx list.
	maxByValues = 366
	// maxCandidatesPerPeriod bounds the times rrule-go builds for one period
	// (a year for FREQ=YEARLY, and so on) before it hands out the first.
	maxCandidatesPerPeriod = 100_000
)

// recurrence is a parsed rrule. The rule runs on wall-clock times held in
// UTC, which has no gaps and no repeats: RFC 5545 expands recurrences in
// local time, and each local time is read in the window's zone afterwards
// (instant). UNTIL is kept apart for the same reason: it names an instant,
// which is compared with the instants of the occurrences.
type recurrence struct {
	options rrule.ROption
	until   time.Time // the instant of UNTIL, zero if none
}

// parseRRule parses the rrule field: an RFC 5545 RRULE value
// ("FREQ=WEEKLY;BYDAY=SA"), optionally prefixed "RRULE:", in any case (RFC
// 5545 names and values are case-insensitive). DTSTART belongs in dtstart,
// and BYEASTER, an extension of rrule-go beyond RFC 5545, can crash it.
func parseRRule(value string, start dateTime) (*recurrence, error) {
	value = strings.ToUpper(strings.TrimSpace(value))
	if strings.ContainsAny(value, "\r\n") {
		return nil, errors.New("one RRULE value only: DTSTART goes in dtstart, and EXDATE or RDATE are not part of Kargo's API")
	}
	value = strings.TrimPrefix(value, "RRULE:")
	var parts []string
	var untilValue string
	for _, part := range strings.Split(value, ";") {
		if part == "" {
			continue // a trailing or doubled semicolon
		}
		key, v, _ := strings.Cut(part, "=")
		switch key {
		case "DTSTART":
			return nil, errors.New("DTSTART belongs in dtstart, not in the rrule")
		case "BYEASTER":
			return nil, errors.New("BYEASTER is not RFC 5545")
		case "UNTIL":
			if v == "" {
				return nil, errors.New("UNTIL option has no value")
			}
			untilValue = v
			continue
		}
		parts = append(parts, part)
	}
	opts, err := rrule.StrToROptionInLocation(strings.Join(parts, ";"), time.UTC)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", value, err)
	}
	if err := checkBounds(opts, start.wall); err != nil {
		return nil, fmt.Errorf("%q: %w", value, err)
	}
	opts.Dtstart = start.wall
	if _, err := rrule.NewRRule(*opts); err != nil {
		return nil, fmt.Errorf("%q: %w", value, err)
	}
	rec := &recurrence{options: *opts}
	if untilValue != "" {
		// A floating or DATE UNTIL is read in dtstart's zone, a UTC one as
		// it is (§3.3.10); a TZID has no place there.
		if strings.Contains(untilValue, "TZID") {
			return nil, fmt.Errorf("UNTIL %q: no TZID in UNTIL: it is read in dtstart's zone, or is UTC", untilValue)
		}
		until, err := parseDateTime(untilValue)
		if err != nil {
			return nil, fmt.Errorf("UNTIL: %w", err)
		}
		if !strings.HasSuffix(untilValue, "Z") {
			until.loc = start.loc
		}
		rec.until = until.at()
	}
	return rec, nil
}

// checkBounds refuses the rules on which rrule-go would loop for ever, or
// build an unbounded set of times for one period, or overflow.
func checkBounds(o *rrule.ROption, start time.Time) error {
	if o.Count < 0 {
		// rrule-go would read a negative COUNT as no COUNT at all.
		return errors.New("COUNT must not be negative")
	}
	if o.Interval > maxInterval {
		return fmt.Errorf("INTERVAL must be at most %d", maxInterval)
	}
	lists := map[string][]int{
		"BYSETPOS": o.Bysetpos, "BYMONTH": o.Bymonth, "BYMONTHDAY": o.Bymonthday,
		"BYYEARDAY": o.Byyearday, "BYWEEKNO": o.Byweekno, "BYHOUR": o.Byhour,
		"BYMINUTE": o.Byminute, "BYSECOND": o.Bysecond,
	}
	for name, list := range lists {
		if len(list) > maxByValues {
			return fmt.Errorf("%s has more than %d values", name, maxByValues)
		}
	}
	if len(o.Byweekday) > maxByValues {
		return fmt.Errorf("BYDAY has more than %d values", maxByValues)
	}
	interval := max(1, o.Interval)
	atLeastOne := func(list []int) int { return max(1, len(list)) }
	// The times of one period: for FREQ=HOURLY and finer, the period is one
	// hour, minute or second, and its times come from the finer BYxxx lists.
	var timesPerPeriod, daysPerPeriod int
	switch o.Freq {
	case rrule.YEARLY, rrule.MONTHLY, rrule.WEEKLY, rrule.DAILY:
		timesPerPeriod = atLeastOne(o.Byhour) * atLeastOne(o.Byminute) * atLeastOne(o.Bysecond)
		daysPerPeriod = map[rrule.Frequency]int{rrule.YEARLY: 366, rrule.MONTHLY: 31, rrule.WEEKLY: 7, rrule.DAILY: 1}[o.Freq]
	case rrule.HOURLY:
		timesPerPeriod, daysPerPeriod = atLeastOne(o.Byminute)*atLeastOne(o.Bysecond), 1
	case rrule.MINUTELY:
		timesPerPeriod, daysPerPeriod = atLeastOne(o.Bysecond), 1
	default:
		timesPerPeriod, daysPerPeriod = 1, 1
	}
	if timesPerPeriod*daysPerPeriod > maxCandidatesPerPeriod {
		return fmt.Errorf("the BYxxx lists make more than %d times per period", maxCandidatesPerPeriod)
	}
	if o.Freq >= rrule.HOURLY {
		// A BYSETPOS beyond the one period's times selects nothing, and
		// rrule-go would then walk every hour (minute, second) to year 9999.
		for _, pos := range o.Bysetpos {
			if pos > timesPerPeriod || -pos > timesPerPeriod {
				return fmt.Errorf("BYSETPOS=%d selects nothing: FREQ=%v has %d time(s) per period", pos, o.Freq, timesPerPeriod)
			}
		}
		if !reachable(o, start, interval) {
			return errors.New("no time it steps through is in BYHOUR, BYMINUTE and BYSECOND (rrule-go would search for ever)")
		}
	}
	return nil
}

// reachable reports whether a FREQ=HOURLY, MINUTELY or SECONDLY rule
// stepping by interval from start ever reaches a time of day its BYHOUR,
// BYMINUTE and BYSECOND allow. rrule-go steps until it does, without
// limit: FREQ=HOURLY;INTERVAL=2;BYHOUR=1 from an even hour never returns.
// Stepping keeps the time of day congruent to the start's modulo
// gcd(interval, period of a day), so one pass over the day decides.
func reachable(o *rrule.ROption, start time.Time, interval int) bool {
	unit := map[rrule.Frequency]int{rrule.HOURLY: 3600, rrule.MINUTELY: 60, rrule.SECONDLY: 1}[o.Freq]
	stepsPerDay := 86400 / unit
	g := gcd(interval%stepsPerDay+stepsPerDay, stepsPerDay)
	startStep := (start.Hour()*3600 + start.Minute()*60 + start.Second()) / unit
	allowed := func(list []int, v int) bool {
		if len(list) == 0 {
			return true
		}
		for _, x := range list {
			if x == v {
				return true
			}
		}
		return false
	}
	for step := startStep % g; step < stepsPerDay; step += g {
		second := step * unit
		h, m, s := second/3600, second/60%60, second%60
		if !allowed(o.Byhour, h) {
			continue
		}
		if o.Freq >= rrule.MINUTELY && !allowed(o.Byminute, m) {
			continue
		}
		if o.Freq == rrule.SECONDLY && !allowed(o.Bysecond, s) {
			continue
		}
		return true
	}
	return false
}

func gcd(a, b int) int {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// iterator returns the rule's wall-clock starts in order. It builds a new
// RRule each time: rrule-go writes to the rule while iterating, so one
// shared between goroutines would race.
func (r *recurrence) iterator() (rrule.Next, error) {
	rule, err := rrule.NewRRule(r.options)
	if err != nil {
		return nil, err
	}
	return rule.Iterator(), nil
}
