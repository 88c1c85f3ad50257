package windows

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var (
	weekendFreeze = Window{
		Name: "weekend-freeze", Kind: KindDeny, RRule: "FREQ=WEEKLY;BYDAY=SA",
		DTStart: "TZID=Europe/Berlin:20260103T000000", DTEnd: "TZID=Europe/Berlin:20260105T000000",
	}
	nightly = Window{
		Name: "nightly", Kind: KindDeny, RRule: "FREQ=DAILY",
		DTStart: "TZID=Europe/Berlin:20260101T220000", DTEnd: "TZID=Europe/Berlin:20260102T060000",
	}
	businessHours = Window{
		Name: "business-hours", Kind: KindAllow, RRule: "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR",
		DTStart: "TZID=Europe/Berlin:20260105T090000", DTEnd: "TZID=Europe/Berlin:20260105T170000",
	}
	christmas = Window{Name: "christmas", Kind: KindDeny, DTStart: "20261224T000000Z", DTEnd: "20261227T000000Z"}
)

func closed(from, until time.Time, kind ClosureKind, opensAt time.Time, windows ...string) Interval {
	return Interval{From: from, Until: until, Kind: kind, Windows: windows, OpensAt: opensAt}
}

func TestSchedule(t *testing.T) {
	var never time.Time // OpensAt when the closure runs past the horizon
	tests := []struct {
		name        string
		windows     []Window
		from, until time.Time
		want        []Interval
	}{
		{
			// Europe/Berlin moves to CEST on Sunday 29 March 2026 at 02:00.
			// Each occurrence starts at 00:00 local on Saturday (23:00 UTC
			// before, 22:00 UTC after) and lasts exactly 48 hours (RFC 5545
			// §3.8.5.3), so the one across the change ends at 01:00 CEST on
			// Monday.
			name:    "weekend freeze across the spring DST change",
			windows: []Window{weekendFreeze},
			from:    utc(2026, 3, 20, 0, 0), until: utc(2026, 4, 6, 0, 0),
			want: []Interval{
				closed(utc(2026, 3, 20, 23, 0), utc(2026, 3, 22, 23, 0), ClosedByDeny, utc(2026, 3, 22, 23, 0), "weekend-freeze"),
				closed(utc(2026, 3, 27, 23, 0), utc(2026, 3, 29, 23, 0), ClosedByDeny, utc(2026, 3, 29, 23, 0), "weekend-freeze"),
				closed(utc(2026, 4, 3, 22, 0), utc(2026, 4, 5, 22, 0), ClosedByDeny, utc(2026, 4, 5, 22, 0), "weekend-freeze"),
			},
		},
		{
			// Back to CET on Sunday 25 October 2026 at 03:00: the occurrence
			// across it ends at 23:00 CET on Sunday, 48 hours on.
			name:    "weekend freeze across the autumn DST change",
			windows: []Window{weekendFreeze},
			from:    utc(2026, 10, 20, 0, 0), until: utc(2026, 11, 2, 0, 0),
			want: []Interval{
				closed(utc(2026, 10, 23, 22, 0), utc(2026, 10, 25, 22, 0), ClosedByDeny, utc(2026, 10, 25, 22, 0), "weekend-freeze"),
				closed(utc(2026, 10, 30, 23, 0), utc(2026, 11, 1, 23, 0), ClosedByDeny, utc(2026, 11, 1, 23, 0), "weekend-freeze"),
			},
		},
		{
			name:    "nightly Deny, 22:00-06:00 Berlin in summer",
			windows: []Window{nightly},
			from:    utc(2026, 6, 10, 12, 0), until: utc(2026, 6, 12, 12, 0),
			want: []Interval{
				closed(utc(2026, 6, 10, 20, 0), utc(2026, 6, 11, 4, 0), ClosedByDeny, utc(2026, 6, 11, 4, 0), "nightly"),
				closed(utc(2026, 6, 11, 20, 0), utc(2026, 6, 12, 4, 0), ClosedByDeny, utc(2026, 6, 12, 4, 0), "nightly"),
			},
		},
		{
			// Friday 9 January 00:00 to Tuesday 13 January 00:00 Berlin.
			name:    "Allow only: closed outside business hours, and past the horizon",
			windows: []Window{businessHours},
			from:    utc(2026, 1, 8, 23, 0), until: utc(2026, 1, 12, 23, 0),
			want: []Interval{
				closed(utc(2026, 1, 8, 23, 0), utc(2026, 1, 9, 8, 0), ClosedOutsideAllow, utc(2026, 1, 9, 8, 0), "business-hours"),
				closed(utc(2026, 1, 9, 16, 0), utc(2026, 1, 12, 8, 0), ClosedOutsideAllow, utc(2026, 1, 12, 8, 0), "business-hours"),
				closed(utc(2026, 1, 12, 16, 0), utc(2026, 1, 12, 23, 0), ClosedOutsideAllow, never, "business-hours"),
			},
		},
		{
			name: "Deny inside Allow: Deny wins; a Deny touching the closure after hours merges with it",
			windows: []Window{businessHours,
				{Name: "lunch", Kind: KindDeny, RRule: "FREQ=WEEKLY;BYDAY=FR", DTStart: "TZID=Europe/Berlin:20260109T120000", DTEnd: "TZID=Europe/Berlin:20260109T130000"},
				{Name: "friday-evening", Kind: KindDeny, RRule: "FREQ=WEEKLY;BYDAY=FR", DTStart: "TZID=Europe/Berlin:20260109T160000", DTEnd: "TZID=Europe/Berlin:20260109T200000"},
			},
			from: utc(2026, 1, 9, 6, 0), until: utc(2026, 1, 9, 22, 0),
			want: []Interval{
				closed(utc(2026, 1, 9, 6, 0), utc(2026, 1, 9, 8, 0), ClosedOutsideAllow, utc(2026, 1, 9, 8, 0), "business-hours"),
				closed(utc(2026, 1, 9, 11, 0), utc(2026, 1, 9, 12, 0), ClosedByDeny, utc(2026, 1, 9, 12, 0), "lunch"),
				closed(utc(2026, 1, 9, 15, 0), utc(2026, 1, 9, 22, 0), ClosedByDeny, never, "business-hours", "friday-evening"),
			},
		},
		{
			name:    "one-shot window inside the horizon",
			windows: []Window{christmas},
			from:    utc(2026, 12, 20, 0, 0), until: utc(2027, 1, 1, 0, 0),
			want: []Interval{closed(utc(2026, 12, 24, 0, 0), utc(2026, 12, 27, 0, 0), ClosedByDeny, utc(2026, 12, 27, 0, 0), "christmas")},
		},
		{
			name:    "one-shot window already in progress",
			windows: []Window{christmas},
			from:    utc(2026, 12, 25, 12, 0), until: utc(2027, 1, 1, 0, 0),
			want: []Interval{closed(utc(2026, 12, 25, 12, 0), utc(2026, 12, 27, 0, 0), ClosedByDeny, utc(2026, 12, 27, 0, 0), "christmas")},
		},
		{
			name:    "one-shot window over",
			windows: []Window{christmas},
			from:    utc(2026, 12, 27, 0, 0), until: utc(2027, 1, 1, 0, 0),
		},
		{
			name:    "one-shot window not yet begun",
			windows: []Window{christmas},
			from:    utc(2026, 12, 1, 0, 0), until: utc(2026, 12, 24, 0, 0),
		},
		{
			// Sunday 11 January 12:00 Berlin: the freeze began Saturday 00:00.
			name:    "an occurrence already in progress at the start of the horizon",
			windows: []Window{weekendFreeze},
			from:    utc(2026, 1, 11, 11, 0), until: utc(2026, 1, 13, 0, 0),
			want: []Interval{closed(utc(2026, 1, 11, 11, 0), utc(2026, 1, 11, 23, 0), ClosedByDeny, utc(2026, 1, 11, 23, 0), "weekend-freeze")},
		},
		{
			name: "overlapping windows merge and keep every name, in order, once",
			windows: []Window{
				christmas,
				{Name: "year-end", Kind: KindDeny, DTStart: "20261226T000000Z", DTEnd: "20270102T000000Z"},
				{Name: "christmas", Kind: KindDeny, DTStart: "20261223T000000Z", DTEnd: "20261224T000000Z"},
				{Name: "later", Kind: KindDeny, DTStart: "20270103T000000Z", DTEnd: "20270104T000000Z"},
			},
			from: utc(2026, 12, 1, 0, 0), until: utc(2027, 2, 1, 0, 0),
			want: []Interval{
				closed(utc(2026, 12, 23, 0, 0), utc(2027, 1, 2, 0, 0), ClosedByDeny, utc(2027, 1, 2, 0, 0), "christmas", "year-end"),
				closed(utc(2027, 1, 3, 0, 0), utc(2027, 1, 4, 0, 0), ClosedByDeny, utc(2027, 1, 4, 0, 0), "later"),
			},
		},
		{
			name: "two Allow windows: open while either is active",
			windows: []Window{
				{Name: "morning", Kind: KindAllow, RRule: "FREQ=DAILY", DTStart: "20260101T080000Z", DTEnd: "20260101T120000Z"},
				{Name: "afternoon", Kind: KindAllow, RRule: "FREQ=DAILY", DTStart: "20260101T110000Z", DTEnd: "20260101T150000Z"},
			},
			from: utc(2026, 2, 1, 0, 0), until: utc(2026, 2, 2, 0, 0),
			want: []Interval{
				closed(utc(2026, 2, 1, 0, 0), utc(2026, 2, 1, 8, 0), ClosedOutsideAllow, utc(2026, 2, 1, 8, 0), "morning", "afternoon"),
				closed(utc(2026, 2, 1, 15, 0), utc(2026, 2, 2, 0, 0), ClosedOutsideAllow, never, "morning", "afternoon"),
			},
		},
		{
			name:    "a one-shot Allow window that has passed closes the Stage, with no known open",
			windows: []Window{{Name: "release-day", Kind: KindAllow, DTStart: "20260101T090000Z", DTEnd: "20260101T170000Z"}},
			from:    utc(2026, 3, 1, 0, 0), until: utc(2026, 3, 8, 0, 0),
			want: []Interval{closed(utc(2026, 3, 1, 0, 0), utc(2026, 3, 8, 0, 0), ClosedOutsideAllow, never, "release-day")},
		},
		{
			name:    "occurrences longer than the period overlap into one closure",
			windows: []Window{{Name: "rolling", Kind: KindDeny, RRule: "FREQ=HOURLY;INTERVAL=2", DTStart: "20260101T000000Z", DTEnd: "20260101T030000Z"}},
			from:    utc(2026, 1, 1, 0, 0), until: utc(2026, 1, 1, 12, 0),
			want: []Interval{closed(utc(2026, 1, 1, 0, 0), utc(2026, 1, 1, 12, 0), ClosedByDeny, never, "rolling")},
		},
		{
			name:    "COUNT ends the rule",
			windows: []Window{{Name: "three-nights", Kind: KindDeny, RRule: "FREQ=DAILY;COUNT=3", DTStart: "20260101T220000Z", DTEnd: "20260102T060000Z"}},
			from:    utc(2026, 1, 2, 12, 0), until: utc(2026, 1, 10, 0, 0),
			want: []Interval{
				closed(utc(2026, 1, 2, 22, 0), utc(2026, 1, 3, 6, 0), ClosedByDeny, utc(2026, 1, 3, 6, 0), "three-nights"),
				closed(utc(2026, 1, 3, 22, 0), utc(2026, 1, 4, 6, 0), ClosedByDeny, utc(2026, 1, 4, 6, 0), "three-nights"),
			},
		},
		{
			// A floating UNTIL is read in dtstart's zone, and is inclusive:
			// the occurrence at 22:00 Berlin on 3 January is the last.
			name:    "UNTIL is inclusive and read in dtstart's zone",
			windows: []Window{{Name: "until", Kind: KindDeny, RRule: "FREQ=DAILY;UNTIL=20260103T220000", DTStart: "TZID=Europe/Berlin:20260101T220000", DTEnd: "TZID=Europe/Berlin:20260101T230000"}},
			from:    utc(2026, 1, 1, 0, 0), until: utc(2026, 1, 10, 0, 0),
			want: []Interval{
				closed(utc(2026, 1, 1, 21, 0), utc(2026, 1, 1, 22, 0), ClosedByDeny, utc(2026, 1, 1, 22, 0), "until"),
				closed(utc(2026, 1, 2, 21, 0), utc(2026, 1, 2, 22, 0), ClosedByDeny, utc(2026, 1, 2, 22, 0), "until"),
				closed(utc(2026, 1, 3, 21, 0), utc(2026, 1, 3, 22, 0), ClosedByDeny, utc(2026, 1, 3, 22, 0), "until"),
			},
		},
		{
			// 02:30 does not exist in Berlin on 29 March and exists twice on
			// 25 October: RFC 5545 reads the first as 03:30 CEST and the
			// second as its first occurrence (CEST).
			name:    "occurrences in a DST gap and a DST repeat",
			windows: []Window{{Name: "backup", Kind: KindDeny, RRule: "FREQ=YEARLY;BYMONTH=3,10;BYDAY=-1SU", DTStart: "TZID=Europe/Berlin:20260329T023000", DTEnd: "TZID=Europe/Berlin:20260329T040000"}},
			from:    utc(2026, 1, 1, 0, 0), until: utc(2027, 1, 1, 0, 0),
			want: []Interval{
				closed(utc(2026, 3, 29, 1, 30), utc(2026, 3, 29, 2, 0), ClosedByDeny, utc(2026, 3, 29, 2, 0), "backup"),
				closed(utc(2026, 10, 25, 0, 30), utc(2026, 10, 25, 1, 0), ClosedByDeny, utc(2026, 10, 25, 1, 0), "backup"),
			},
		},
		{name: "no windows", from: utc(2026, 1, 1, 0, 0), until: utc(2026, 2, 1, 0, 0)},
		{name: "an empty horizon", windows: []Window{businessHours}, from: utc(2026, 2, 1, 0, 0), until: utc(2026, 2, 1, 0, 0)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var windows []*Compiled
			for _, w := range tt.windows {
				windows = append(windows, mustCompile(t, w))
			}
			got, err := Schedule(windows, tt.from, tt.until, 100)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("closed intervals (-want +got):\n%s", diff)
			}
		})
	}
}

// The weekend freeze starts at 00:00 on Saturday by the clock on the wall in
// Berlin, all year round.
func TestWeekendFreezeFollowsTheWallClock(t *testing.T) {
	berlin := zone(t, "Europe/Berlin")
	c := mustCompile(t, weekendFreeze)
	occurrences, err := c.Occurrences(utc(2026, 1, 1, 0, 0), utc(2027, 1, 1, 0, 0), 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(occurrences) != 52 {
		t.Errorf("%d weekends in 2026, want 52", len(occurrences))
	}
	for _, o := range occurrences {
		local := o.Start.In(berlin)
		if local.Weekday() != time.Saturday || local.Hour() != 0 || local.Minute() != 0 {
			t.Errorf("an occurrence starts at %v, not Saturday 00:00 in Berlin", local)
		}
		if o.End.Sub(o.Start) != 48*time.Hour {
			t.Errorf("an occurrence lasts %s, not 48h", o.End.Sub(o.Start))
		}
	}
}

func TestScheduleLeavesOutTooDenseWindows(t *testing.T) {
	dense := mustCompile(t, Window{Name: "every-second", Kind: KindDeny, RRule: "FREQ=SECONDLY", DTStart: "20260101T000000Z", DTEnd: "20260101T000001Z"})
	longAgo := mustCompile(t, Window{Name: "every-minute-since-2020", Kind: KindDeny, RRule: "FREQ=MINUTELY", DTStart: "20200101T000000Z", DTEnd: "20200101T000001Z"})
	ok := mustCompile(t, christmas)
	got, err := Schedule([]*Compiled{dense, ok, longAgo}, utc(2026, 12, 20, 0, 0), utc(2027, 1, 1, 0, 0), 1000)
	want := []Interval{closed(utc(2026, 12, 24, 0, 0), utc(2026, 12, 27, 0, 0), ClosedByDeny, utc(2026, 12, 27, 0, 0), "christmas")}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("closed intervals of the other windows (-want +got):\n%s", diff)
	}
	var left []string
	for _, we := range WindowErrors(err) {
		left = append(left, we.Window+" "+we.Field)
	}
	if diff := cmp.Diff([]string{"every-second rrule", "every-minute-since-2020 rrule"}, left); diff != "" {
		t.Errorf("windows left out (-want +got):\n%s\n%v", diff, err)
	}
	if !errors.Is(err, ErrTooDense) {
		t.Errorf("error %v does not wrap ErrTooDense", err)
	}
}

// A broken Allow window left out must not close the Stage by itself; the
// other windows still apply.
func TestScheduleWithoutTheBrokenAllowWindow(t *testing.T) {
	dense := mustCompile(t, Window{Name: "dense-allow", Kind: KindAllow, RRule: "FREQ=SECONDLY", DTStart: "20260101T000000Z", DTEnd: "20260101T000001Z"})
	got, err := Schedule([]*Compiled{dense, mustCompile(t, christmas)}, utc(2026, 12, 20, 0, 0), utc(2027, 1, 1, 0, 0), 10)
	if len(WindowErrors(err)) != 1 {
		t.Fatalf("error = %v, want one window left out", err)
	}
	want := []Interval{closed(utc(2026, 12, 24, 0, 0), utc(2026, 12, 27, 0, 0), ClosedByDeny, utc(2026, 12, 27, 0, 0), "christmas")}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("closed intervals (-want +got):\n%s", diff)
	}
}

func TestScheduleRefusesNoOccurrencesAllowed(t *testing.T) {
	if _, err := Schedule(nil, utc(2026, 1, 1, 0, 0), utc(2026, 1, 2, 0, 0), 0); err == nil {
		t.Error("maxOccurrences 0 was accepted")
	}
}

func TestActiveAt(t *testing.T) {
	windows := []*Compiled{mustCompile(t, businessHours), mustCompile(t, nightly), mustCompile(t, weekendFreeze)}
	tests := []struct {
		name       string
		at         time.Time
		wantClosed bool
		want       Reason
	}{
		{name: "Wednesday 10:00 Berlin: open", at: utc(2026, 1, 7, 9, 0)},
		{name: "Wednesday 17:00 Berlin: the Allow window just ended", at: utc(2026, 1, 7, 16, 0), wantClosed: true, want: Reason{Kind: ClosedOutsideAllow, Windows: []string{"business-hours"}}},
		{name: "Wednesday 08:59:59 Berlin: not yet", at: utc(2026, 1, 7, 7, 59).Add(59 * time.Second), wantClosed: true, want: Reason{Kind: ClosedOutsideAllow, Windows: []string{"business-hours"}}},
		{name: "Wednesday 23:00 Berlin: nightly Deny, outside Allow too", at: utc(2026, 1, 7, 22, 0), wantClosed: true, want: Reason{Kind: ClosedByDeny, Windows: []string{"business-hours", "nightly"}}},
		{name: "Saturday noon: the weekend freeze", at: utc(2026, 1, 10, 11, 0), wantClosed: true, want: Reason{Kind: ClosedByDeny, Windows: []string{"business-hours", "weekend-freeze"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			closed, reason, err := ActiveAt(windows, tt.at)
			if err != nil {
				t.Fatal(err)
			}
			if closed != tt.wantClosed {
				t.Errorf("closed = %v, want %v", closed, tt.wantClosed)
			}
			if diff := cmp.Diff(tt.want, reason); diff != "" {
				t.Errorf("reason (-want +got):\n%s", diff)
			}
		})
	}
}

// ActiveAt and Schedule agree at each boundary, a second either side, and
// in between; both when ActiveAt can use the expansion Schedule just made,
// and when it must expand for itself.
func TestActiveAtAgreesWithSchedule(t *testing.T) {
	compileAll := func() []*Compiled {
		return []*Compiled{mustCompile(t, businessHours), mustCompile(t, nightly), mustCompile(t, weekendFreeze), mustCompile(t, christmas)}
	}
	windows := compileAll()
	from, until := utc(2026, 12, 18, 0, 0), utc(2027, 1, 4, 0, 0)
	intervals, err := Schedule(windows, from, until, 1000)
	if err != nil {
		t.Fatal(err)
	}
	var instants []time.Time
	for at := from; at.Before(until); at = at.Add(97 * time.Minute) {
		instants = append(instants, at)
	}
	for _, iv := range intervals {
		for _, edge := range []time.Time{iv.From, iv.Until} {
			instants = append(instants, edge.Add(-time.Second), edge, edge.Add(time.Second))
		}
	}
	for name, windows := range map[string][]*Compiled{"with Schedule's expansion": windows, "expanding for itself": compileAll()} {
		t.Run(name, func(t *testing.T) {
			for _, at := range instants {
				if !at.Before(until) || at.Before(from) {
					continue
				}
				want := false
				for _, iv := range intervals {
					if !at.Before(iv.From) && at.Before(iv.Until) {
						want = true
					}
				}
				if got, _, err := ActiveAt(windows, at); err != nil || got != want {
					t.Fatalf("at %v: ActiveAt = %v (%v), Schedule says closed = %v", at, got, err, want)
				}
			}
		})
	}
}

// One Compiled serves many Stages at once (run with -race).
func TestScheduleIsSafeForConcurrentUse(t *testing.T) {
	windows := []*Compiled{mustCompile(t, businessHours), mustCompile(t, weekendFreeze)}
	want, err := Schedule(windows, utc(2026, 1, 1, 0, 0), utc(2026, 2, 1, 0, 0), 100)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			got, err := Schedule(windows, utc(2026, 1, 1, 0, 0), utc(2026, 2, 1, 0, 0), 100)
			if err != nil {
				t.Error(err)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("a concurrent Schedule differs:\n%s", diff)
			}
		})
	}
	wg.Wait()
}
