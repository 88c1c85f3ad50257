package windows

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// FuzzCompile: no window, however garbled, panics Compile, Schedule or
// ActiveAt, or gets past rrule-go's panics only through recoverInto (the
// safety net is for rules no one foresaw, and the fuzzer is here to find
// them). The intervals Schedule returns are always well-formed.
func FuzzCompile(f *testing.F) {
	seeds := []struct{ name, kind, rrule, dtstart, dtend, label string }{
		{"glob:prod-*", "Deny", "FREQ=WEEKLY;BYDAY=SA", "TZID=Europe/Berlin:20260103T000000", "TZID=Europe/Berlin:20260105T000000", "env=prod"},
		{"regex:^pr", "Allow", "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR", "TZID=America/New_York:20260105T090000", "TZID=America/New_York:20260105T170000", ""},
		{"", "Deny", "", "20261224T000000Z", "20261227T000000Z", ""},
		{"prod", "Deny", "FREQ=SECONDLY", "20260101T000000Z", "20260101T000001Z", ""},
		{"", "Deny", "FREQ=HOURLY;INTERVAL=2;BYHOUR=1", "20260101T000000", "20260101T010000", ""},
		{"", "Allow", "FREQ=MONTHLY;BYDAY=-1FR;BYSETPOS=1", "TZID=Asia/Kolkata:20260130T180000", "TZID=Asia/Kolkata:20260202T090000", ""},
		{"", "Deny", "FREQ=YEARLY;BYMONTH=3,10;BYDAY=-1SU", "TZID=Europe/Berlin:20260329T023000", "TZID=Europe/Berlin:20260329T040000", ""},
		{"", "Deny", "FREQ=DAILY;UNTIL=20260110T000000;COUNT=4", "20260101", "20260102", ""},
		{"regex:(", "Allow", "FREQ=YEARLY;BYEASTER=400", "TZID=Local:20260101T000000", "", "a b=c"},
		{"glob:[", "Deny", "FREQ=MINUTELY;INTERVAL=7;BYHOUR=3;BYMINUTE=5", "TZID=Pacific/Apia:20111229T000000", "TZID=Pacific/Apia:20111231T120000", "x"},
	}
	for _, s := range seeds {
		f.Add(s.name, s.kind, s.rrule, s.dtstart, s.dtend, s.label)
	}
	f.Fuzz(func(t *testing.T, name, kind, rrule, dtstart, dtend, label string) {
		w := Window{Name: "fuzz", Kind: Kind(kind), RRule: rrule, DTStart: dtstart, DTEnd: dtend}
		if name != "" || label != "" {
			w.StageSelector = &Selector{Name: name}
			w.ProjectSelector = &Selector{Name: name}
			if key, value, ok := strings.Cut(label, "="); ok {
				w.StageSelector.LabelSelector = &metav1.LabelSelector{MatchLabels: map[string]string{key: value}}
			}
		}
		for _, compile := range []func(Window) (*Compiled, error){Compile, CompileClusterWide} {
			c, err := compile(w)
			if err != nil {
				if c != nil {
					t.Fatalf("a compiled window and an error: %v", err)
				}
				noPanicIn(t, err)
				continue
			}
			c.Matches(StageRef{Project: "p", Name: name, Labels: map[string]string{"env": "prod"}})
			start := c.start.at()
			for _, horizon := range [][2]time.Time{
				{utc(2026, 1, 1, 0, 0), utc(2026, 1, 15, 0, 0)},
				{start.Add(-24 * time.Hour), start.Add(72 * time.Hour)},
			} {
				intervals, err := Schedule([]*Compiled{c}, horizon[0], horizon[1], 200)
				noPanicIn(t, err)
				checkIntervals(t, intervals, horizon[0], horizon[1])
				_, _, err = ActiveAt([]*Compiled{c}, horizon[0].Add(time.Hour))
				noPanicIn(t, err)
			}
		}
	})
}

// FuzzParseWindow: no JSON parses into a panic, and what parses compiles
// or fails cleanly.
func FuzzParseWindow(f *testing.F) {
	f.Add(`{"name":"w","kind":"Deny","rrule":"FREQ=DAILY","dtstart":"20260101T220000Z","dtend":"20260102T060000Z","stageSelector":{"name":"glob:*","matchExpressions":[{"key":"a","operator":"In","values":["b"]}]}}`)
	f.Add(`{"name":1,"kind":[],"stageSelector":"x","disabled":true}`)
	f.Add(`[{"name":"w"}]`)
	f.Fuzz(func(t *testing.T, data string) {
		var item any
		if json.Unmarshal([]byte(data), &item) != nil {
			return
		}
		w, err := ParseWindow(item)
		if err != nil {
			return
		}
		if _, err := CompileClusterWide(w); err != nil {
			noPanicIn(t, err)
		}
	})
}

func noPanicIn(t *testing.T, err error) {
	t.Helper()
	if err != nil && strings.Contains(err.Error(), "panicked") {
		t.Fatalf("rrule-go panicked: %v", err)
	}
}

// checkIntervals: in order, apart, non-empty, inside the horizon, each
// naming a window, and opening at its end unless it runs to the horizon's.
func checkIntervals(t *testing.T, intervals []Interval, from, until time.Time) {
	t.Helper()
	for i, iv := range intervals {
		switch {
		case !iv.From.Before(iv.Until):
			t.Fatalf("interval %d is empty: %+v", i, iv)
		case iv.From.Before(from) || iv.Until.After(until):
			t.Fatalf("interval %d %+v is outside [%v, %v)", i, iv, from, until)
		case i > 0 && !intervals[i-1].Until.Before(iv.From):
			t.Fatalf("intervals %d and %d touch or overlap: %+v %+v", i-1, i, intervals[i-1], iv)
		case len(iv.Windows) == 0:
			t.Fatalf("interval %d names no window", i)
		case iv.Until.Equal(until) != iv.OpensAt.IsZero():
			t.Fatalf("interval %d: OpensAt %v with Until %v and horizon end %v", i, iv.OpensAt, iv.Until, until)
		case !iv.OpensAt.IsZero() && !iv.OpensAt.Equal(iv.Until):
			t.Fatalf("interval %d opens at %v, not at its end %v", i, iv.OpensAt, iv.Until)
		}
	}
}
