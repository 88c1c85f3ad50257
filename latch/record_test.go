package latch

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestDecodeRoundTrip(t *testing.T) {
	for name, r := range map[string]Record{
		"idle":     {Phase: PhaseIdle},
		"latched":  latched(),
		"degraded": degraded(minutes(3)),
		"failed":   failedAt(latched(), minutes(9), ReasonDegraded, "gone"),
	} {
		t.Run(name, func(t *testing.T) {
			got, err := Decode(r.Encode())
			if err != nil {
				t.Fatalf("Decode(Encode()) error: %v", err)
			}
			if diff := cmp.Diff(r, got); diff != "" {
				t.Errorf("round trip mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// Records carry their version. One without it (written before versions)
// is version 1; one of a newer version is reported as such, not as garbage,
// even when it has fields or phases this version does not know.
func TestDecodeVersions(t *testing.T) {
	if enc := latched().Encode(); !strings.HasPrefix(enc, `{"version":1,`) {
		t.Errorf("encoded record does not start with its version: %.40s", enc)
	}
	unversioned := strings.Replace(latched().Encode(), `"version":1,`, "", 1)
	if r, err := Decode(unversioned); err != nil || r.Phase != PhaseLatched {
		t.Errorf("a record without a version: %+v, %v; want it read as version 1", r.Phase, err)
	}
	for _, value := range []string{latched().Encode(), unversioned, "", "garbage"} {
		if newer := NewerVersion(value); newer != nil {
			t.Errorf("NewerVersion(%.30s) = %v, want nil", value, newer)
		}
	}
	for name, value := range map[string]string{
		"known shape":          strings.Replace(latched().Encode(), `"version":1,`, `"version":2,`, 1),
		"unknown phase":        `{"version":2,"phase":"Hyperlatched","promotedAt":"2026-11-29T10:00:00Z"}`,
		"unknown field shapes": `{"version":3,"phase":"Latched","pauses":{"a":1}}`,
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Decode(value)
			var newer *NewerVersionError
			if !errors.As(err, &newer) || newer.Version < 2 {
				t.Errorf("Decode = %v; want a NewerVersionError", err)
			}
			if NewerVersion(value) == nil {
				t.Error("NewerVersion = nil for a newer record")
			}
		})
	}
}

func TestDecodeEmptyIsNoRecord(t *testing.T) {
	r, err := Decode("")
	if err != nil || !r.IsZero() {
		t.Errorf(`Decode("") = %+v, %v; want the zero record and no error`, r, err)
	}
}

func TestDecodeRejectsGarbage(t *testing.T) {
	history := make([]string, HistoryLimit+1)
	for i := range history {
		history[i] = `{"id":"x","actor":"a","startTime":"2026-01-01T00:00:00Z","finishTime":"2026-01-01T00:00:00Z","phase":"Successful"}`
	}
	for name, value := range map[string]string{
		"not JSON":                "{{{",
		"truncated":               latched().Encode()[:40],
		"a JSON string":           `"Latched"`,
		"an empty object":         `{}`,
		"an unknown phase":        `{"phase":"Purple"}`,
		"a bad time":              `{"phase":"Promoted","promotedAt":"yesterday"}`,
		"Failed without failure":  `{"phase":"Failed"}`,
		"failure when not Failed": `{"phase":"Idle","failure":{"reason":"Degraded","at":"2026-01-01T00:00:00Z"}}`,
		"Degraded without since":  `{"phase":"Degraded","promotedAt":"2026-01-01T00:00:00Z"}`,
		"Latched without promote": `{"phase":"Latched"}`,
		"too much history":        `{"phase":"Idle","history":[` + strings.Join(history, ",") + `]}`,
		"enormous":                `{"phase":"Idle","promotion":"` + strings.Repeat("x", 200<<10) + `"` + strings.Repeat(" ", 10),
	} {
		t.Run(name, func(t *testing.T) {
			r, err := Decode(value)
			if err == nil {
				t.Fatalf("Decode accepted %.80q as %+v", value, r)
			}
			if !r.IsZero() {
				t.Errorf("Decode returned a non-zero record %+v with its error", r)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(latched().Encode())
	f.Add(failedAt(latched(), minutes(9), ReasonDegraded, "gone").Encode())
	f.Add(`{"phase":"Degraded","promotedAt":"2026-01-01T00:00:00Z","degradedSince":"2026-01-01T00:00:00Z"}`)
	f.Fuzz(func(t *testing.T, value string) {
		r, err := Decode(value)
		if err != nil || r.IsZero() {
			return
		}
		// Whatever decodes must be safe to step from, and re-encode to itself.
		again, err := Decode(r.Encode())
		if err != nil {
			t.Fatalf("re-decoding %q: %v", r.Encode(), err)
		}
		if again.Encode() != r.Encode() {
			t.Fatalf("encoding is not stable: %q vs %q", r.Encode(), again.Encode())
		}
		for _, h := range []Health{HealthHealthy, HealthUnhealthy, HealthProgressing} {
			Step(defaults(), r, stageAfterP1(h), at(minutes(100)))
		}
	})
}

func TestReadsApps(t *testing.T) {
	for value, want := range map[string]bool{
		"":                                true, // no record: a first look may start a cycle
		"{garbage":                        true, // garbage is no record
		`{"phase":"Bogus"}`:               true,
		promoted().Encode():               true,
		latched().Encode():                false,
		degraded(minutes(3)).Encode():     true,
		Record{Phase: PhaseIdle}.Encode(): false,
		failedAt(latched(), 0, ReasonDegraded, "x").Encode(): false,
	} {
		if got := ReadsApps(value); got != want {
			t.Errorf("ReadsApps(%.40s) = %v, want %v", value, got, want)
		}
	}
}
