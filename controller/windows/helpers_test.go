package windows

import (
	"testing"
	"time"
)

func zone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func utc(y int, mo time.Month, d, h, mi int) time.Time {
	return time.Date(y, mo, d, h, mi, 0, 0, time.UTC)
}

func mustCompile(t testing.TB, w Window) *Compiled {
	t.Helper()
	c, err := Compile(w)
	if err != nil {
		t.Fatalf("Compile(%+v): %v", w, err)
	}
	return c
}

func mustCompileClusterWide(t testing.TB, w Window) *Compiled {
	t.Helper()
	c, err := CompileClusterWide(w)
	if err != nil {
		t.Fatalf("CompileClusterWide(%+v): %v", w, err)
	}
	return c
}

// fields lists the fields of the *WindowError values in err.
func fields(err error) []string {
	var out []string
	for _, we := range WindowErrors(err) {
		out = append(out, we.Field)
	}
	return out
}
