package windows

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestCompileRefusesBadWindows(t *testing.T) {
	base := Window{Name: "freeze", Kind: KindDeny, RRule: "FREQ=WEEKLY;BYDAY=SA", DTStart: "TZID=Europe/Berlin:20260103T000000", DTEnd: "TZID=Europe/Berlin:20260105T000000"}
	with := func(change func(*Window)) Window {
		w := base
		change(&w)
		return w
	}
	tests := []struct {
		name       string
		window     Window
		wantFields []string
	}{
		{name: "no name", window: with(func(w *Window) { w.Name = "" }), wantFields: []string{"name"}},
		{name: "no kind", window: with(func(w *Window) { w.Kind = "" }), wantFields: []string{"kind"}},
		{name: "kind in lower case", window: with(func(w *Window) { w.Kind = "deny" }), wantFields: []string{"kind"}},
		{name: "unparsable rrule", window: with(func(w *Window) { w.RRule = "FREQ=FORTNIGHTLY" }), wantFields: []string{"rrule"}},
		{name: "rrule without FREQ", window: with(func(w *Window) { w.RRule = "BYDAY=SA" }), wantFields: []string{"rrule"}},
		{name: "rrule with an unknown part", window: with(func(w *Window) { w.RRule = "FREQ=DAILY;EVERY=2" }), wantFields: []string{"rrule"}},
		{name: "rrule with DTSTART inside", window: with(func(w *Window) { w.RRule = "FREQ=DAILY;DTSTART=20260101T000000Z" }), wantFields: []string{"rrule"}},
		{name: "rrule with an EXDATE line", window: with(func(w *Window) { w.RRule = "FREQ=DAILY\nEXDATE:20260110T000000Z" }), wantFields: []string{"rrule"}},
		{name: "BYEASTER, which crashes rrule-go", window: with(func(w *Window) { w.RRule = "FREQ=YEARLY;BYEASTER=400" }), wantFields: []string{"rrule"}},
		{name: "BYDAY out of bounds", window: with(func(w *Window) { w.RRule = "FREQ=MONTHLY;BYDAY=+60MO" }), wantFields: []string{"rrule"}},
		{name: "negative COUNT", window: with(func(w *Window) { w.RRule = "FREQ=DAILY;COUNT=-1" }), wantFields: []string{"rrule"}},
		{name: "huge INTERVAL", window: with(func(w *Window) { w.RRule = "FREQ=DAILY;INTERVAL=9223372036854775807" }), wantFields: []string{"rrule"}},
		{name: "UNTIL with a TZID", window: with(func(w *Window) { w.RRule = "FREQ=DAILY;UNTIL=TZID=Europe/Berlin:20260201T000000" }), wantFields: []string{"rrule"}},
		{name: "UNTIL empty", window: with(func(w *Window) { w.RRule = "FREQ=DAILY;UNTIL=" }), wantFields: []string{"rrule"}},
		{name: "UNTIL unparsable", window: with(func(w *Window) { w.RRule = "FREQ=DAILY;UNTIL=tomorrow" }), wantFields: []string{"rrule"}},
		{name: "never occurs: February 30", window: with(func(w *Window) { w.RRule = "FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=30" }), wantFields: []string{"rrule"}},
		{name: "never occurs: UNTIL before dtstart", window: with(func(w *Window) { w.RRule = "FREQ=DAILY;UNTIL=20251201T000000Z" }), wantFields: []string{"rrule"}},
		{name: "never occurs: BYSETPOS beyond a week", window: with(func(w *Window) { w.RRule = "FREQ=WEEKLY;BYDAY=SA;BYSETPOS=2" }), wantFields: []string{"rrule"}},
		{name: "would loop for ever: BYHOUR never stepped on", window: with(func(w *Window) { w.RRule = "FREQ=HOURLY;INTERVAL=2;BYHOUR=1" }), wantFields: []string{"rrule"}},
		{name: "would loop for ever: BYMINUTE never stepped on", window: with(func(w *Window) { w.RRule = "FREQ=MINUTELY;INTERVAL=10;BYMINUTE=5" }), wantFields: []string{"rrule"}},
		{name: "would walk to year 9999 hourly: BYSETPOS", window: with(func(w *Window) { w.RRule = "FREQ=HOURLY;BYSETPOS=2" }), wantFields: []string{"rrule"}},
		{name: "would build millions of times a year", window: with(func(w *Window) {
			w.RRule = "FREQ=YEARLY;BYHOUR=0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23;BYMINUTE=" + strings.TrimSuffix(strings.Repeat("1,", 60), ",")
		}), wantFields: []string{"rrule"}},
		{name: "no dtstart", window: with(func(w *Window) { w.DTStart = "" }), wantFields: []string{"dtstart"}},
		{name: "unparsable dtstart", window: with(func(w *Window) { w.DTStart = "next saturday" }), wantFields: []string{"dtstart"}},
		{name: "unknown TZID", window: with(func(w *Window) { w.DTStart = "TZID=Europe/Atlantis:20260103T000000" }), wantFields: []string{"dtstart"}},
		{name: "unparsable dtend", window: with(func(w *Window) { w.DTEnd = "20260105" + "T25" }), wantFields: []string{"dtend"}},
		{name: "dtend before dtstart", window: with(func(w *Window) { w.DTEnd = "TZID=Europe/Berlin:20260102T000000" }), wantFields: []string{"dtend"}},
		{name: "dtend equal to dtstart, in another zone", window: with(func(w *Window) { w.DTEnd = "20260102T230000Z" }), wantFields: []string{"dtend"}},
		{name: "neither rrule nor dtend", window: with(func(w *Window) { w.RRule, w.DTEnd = "", "" }), wantFields: []string{"dtend"}},
		{name: "rrule but no dtend", window: with(func(w *Window) { w.DTEnd = "" }), wantFields: []string{"dtend"}},
		{name: "every problem at once", window: Window{Name: "all-wrong", Kind: "Sometimes", RRule: "FREQ=NEVER", DTStart: "soon", StageSelector: &Selector{Name: "regex:["}},
			wantFields: []string{"kind", "dtstart", "dtend", "stageSelector.name"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Compile(tt.window)
			if err == nil {
				t.Fatalf("compiled %+v, want an error", c.Window)
			}
			if diff := cmp.Diff(tt.wantFields, fields(err)); diff != "" {
				t.Errorf("fields at fault (-want +got):\n%s\nerror: %v", diff, err)
			}
			for _, we := range WindowErrors(err) {
				if we.Window != tt.window.Name {
					t.Errorf("error names window %q, want %q", we.Window, tt.window.Name)
				}
				if !strings.Contains(we.Error(), "promotion window \""+tt.window.Name+"\": "+we.Field+": ") {
					t.Errorf("message %q does not name the window and the field", we.Error())
				}
			}
		})
	}
}

func TestCompileAcceptsKargosForms(t *testing.T) {
	tests := []struct {
		name         string
		window       Window
		wantDuration time.Duration
		wantZone     string
	}{
		{name: "what Kargo's UI writes", window: Window{Name: "w", Kind: KindAllow, RRule: "FREQ=WEEKLY;BYDAY=MO,TU,WE,TH,FR", DTStart: "TZID=Europe/Berlin:20260105T090000", DTEnd: "TZID=Europe/Berlin:20260105T170000"}, wantDuration: 8 * time.Hour, wantZone: "Europe/Berlin"},
		{name: "one-shot in UTC", window: Window{Name: "w", Kind: KindDeny, DTStart: "20261224T000000Z", DTEnd: "20261227T000000Z"}, wantDuration: 72 * time.Hour, wantZone: "UTC"},
		{name: "RRULE: prefix, lower case, trailing semicolon", window: Window{Name: "w", Kind: KindDeny, RRule: "RRULE:freq=monthly;bymonthday=-1;", DTStart: "20260131T000000", DTEnd: "20260201T000000"}, wantDuration: 24 * time.Hour, wantZone: "UTC"},
		{name: "dtend in another zone", window: Window{Name: "w", Kind: KindDeny, DTStart: "TZID=America/New_York:20260101T090000", DTEnd: "20260101T150000Z"}, wantDuration: time.Hour, wantZone: "America/New_York"},
		{name: "UNTIL and COUNT", window: Window{Name: "w", Kind: KindDeny, RRule: "FREQ=DAILY;COUNT=3;UNTIL=20270101T000000Z", DTStart: "20260101T220000Z", DTEnd: "20260102T060000Z"}, wantDuration: 8 * time.Hour, wantZone: "UTC"},
		{name: "dense but well-formed (refused by Schedule, not here)", window: Window{Name: "w", Kind: KindDeny, RRule: "FREQ=SECONDLY", DTStart: "20260101T000000Z", DTEnd: "20260101T000001Z"}, wantDuration: time.Second, wantZone: "UTC"},
		{name: "the last Friday of the month", window: Window{Name: "w", Kind: KindDeny, RRule: "FREQ=MONTHLY;BYDAY=-1FR", DTStart: "TZID=Asia/Kolkata:20260130T180000", DTEnd: "TZID=Asia/Kolkata:20260202T090000"}, wantDuration: 63 * time.Hour, wantZone: "Asia/Kolkata"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := mustCompile(t, tt.window)
			if c.Duration() != tt.wantDuration {
				t.Errorf("duration = %s, want %s", c.Duration(), tt.wantDuration)
			}
			if c.Location().String() != tt.wantZone {
				t.Errorf("zone = %s, want %s", c.Location(), tt.wantZone)
			}
			if c.Name != tt.window.Name || c.Kind != tt.window.Kind || c.ClusterWide {
				t.Errorf("compiled as %q %q cluster-wide=%v", c.Name, c.Kind, c.ClusterWide)
			}
		})
	}
}

func TestWindowErrorsUnwrap(t *testing.T) {
	inner := &WindowError{Window: "w", Field: "rrule", Err: ErrTooDense}
	err := errors.Join(errors.New("other"), inner, &WindowError{Window: "v", Field: "dtend", Err: errors.New("x")})
	if diff := cmp.Diff([]string{"rrule", "dtend"}, fields(err)); diff != "" {
		t.Errorf("fields (-want +got):\n%s", diff)
	}
	if !errors.Is(err, ErrTooDense) {
		t.Error("errors.Is does not find ErrTooDense")
	}
	if got := WindowErrors(nil); got != nil {
		t.Errorf("WindowErrors(nil) = %v", got)
	}
}
