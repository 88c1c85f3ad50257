package windows

import (
	"testing"
	"time"
)

func TestParseDateTime(t *testing.T) {
	tests := []struct {
		name, in string
		want     time.Time // the instant
		wantZone string
		wantErr  bool
	}{
		{name: "floating is read as UTC", in: "20260101T090000", want: utc(2026, 1, 1, 9, 0), wantZone: "UTC"},
		{name: "UTC", in: "20260101T090000Z", want: utc(2026, 1, 1, 9, 0), wantZone: "UTC"},
		{name: "TZID in winter", in: "TZID=Europe/Berlin:20260101T090000", want: utc(2026, 1, 1, 8, 0), wantZone: "Europe/Berlin"},
		{name: "TZID in summer", in: "TZID=Europe/Berlin:20260701T090000", want: utc(2026, 7, 1, 7, 0), wantZone: "Europe/Berlin"},
		{name: "Kargo's own example", in: "TZID=America/New_York:20260101T090000", want: utc(2026, 1, 1, 14, 0), wantZone: "America/New_York"},
		{name: "DATE is midnight", in: "TZID=Asia/Tokyo:20260101", want: utc(2025, 12, 31, 15, 0), wantZone: "Asia/Tokyo"},
		{name: "tzid in lower case, t and z in lower case", in: "tzid=Europe/Berlin:20260101t090000", want: utc(2026, 1, 1, 8, 0), wantZone: "Europe/Berlin"},
		{name: "surrounding spaces", in: " 20260101T090000Z\n", want: utc(2026, 1, 1, 9, 0), wantZone: "UTC"},
		{name: "TZID=UTC", in: "TZID=UTC:20260101T090000", want: utc(2026, 1, 1, 9, 0), wantZone: "UTC"},

		{name: "RFC 3339", in: "2026-01-01T09:00:00Z", wantErr: true},
		{name: "empty", in: "", wantErr: true},
		{name: "unknown zone", in: "TZID=Mars/Olympus_Mons:20260101T090000", wantErr: true},
		{name: "Local is not a zone", in: "TZID=Local:20260101T090000", wantErr: true},
		{name: "empty zone", in: "TZID=:20260101T090000", wantErr: true},
		{name: "TZID without a time", in: "TZID=Europe/Berlin", wantErr: true},
		{name: "TZID on a UTC time", in: "TZID=Europe/Berlin:20260101T090000Z", wantErr: true},
		{name: "month 13", in: "20261301T090000", wantErr: true},
		{name: "hour 24", in: "20260101T240000", wantErr: true},
		{name: "second 60", in: "20260101T235960", wantErr: true},
		{name: "a property name", in: "DTSTART:20260101T090000", wantErr: true},
		{name: "year 1800", in: "18000101T000000Z", wantErr: true},
		{name: "Go's zero time", in: "00010101T000000Z", wantErr: true},
		{name: "a path as zone", in: "TZID=../../etc/passwd:20260101T090000", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseDateTime(tt.in)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("parseDateTime(%q) = %v, want an error", tt.in, got.at())
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !got.at().Equal(tt.want) {
				t.Errorf("instant = %v, want %v", got.at(), tt.want)
			}
			if got.loc.String() != tt.wantZone {
				t.Errorf("zone = %s, want %s", got.loc, tt.wantZone)
			}
		})
	}
}

// RFC 5545 §3.3.5's own examples, and the same in Berlin, where Go's
// time.Date makes the opposite choices to New York's.
func TestInstantFollowsRFC5545(t *testing.T) {
	ny, berlin := zone(t, "America/New_York"), zone(t, "Europe/Berlin")
	tests := []struct {
		name string
		wall time.Time
		loc  *time.Location
		want time.Time
	}{
		{name: "New York, twice: the first (EDT)", wall: utc(2007, 11, 4, 1, 30), loc: ny, want: utc(2007, 11, 4, 5, 30)},
		{name: "New York, gap: offset before (03:30 EDT)", wall: utc(2007, 3, 11, 2, 30), loc: ny, want: utc(2007, 3, 11, 7, 30)},
		{name: "Berlin, twice: the first (CEST)", wall: utc(2026, 10, 25, 2, 30), loc: berlin, want: utc(2026, 10, 25, 0, 30)},
		{name: "Berlin, gap: offset before (03:30 CEST)", wall: utc(2026, 3, 29, 2, 30), loc: berlin, want: utc(2026, 3, 29, 1, 30)},
		{name: "Berlin, an ordinary time", wall: utc(2026, 3, 29, 12, 0), loc: berlin, want: utc(2026, 3, 29, 10, 0)},
		{name: "Berlin, just after the repeat", wall: utc(2026, 10, 25, 3, 0), loc: berlin, want: utc(2026, 10, 25, 2, 0)},
		{name: "UTC", wall: utc(2026, 3, 29, 2, 30), loc: time.UTC, want: utc(2026, 3, 29, 2, 30)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := instant(tt.wall, tt.loc); !got.Equal(tt.want) {
				t.Errorf("instant = %v (%v), want %v", got, got.In(tt.loc), tt.want)
			}
		})
	}
}
