package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKargoCRDDirRefusesStandInsInCI: with Kargo's real CRDs missing, CI
// (CI set) fails instead of falling back to the stand-ins; a clone outside
// CI falls back; the real ones are used wherever they are, unless
// KARGO_LATCH_STAND_IN_CRDS asks for the stand-ins, in CI too.
func TestKargoCRDDirRefusesStandInsInCI(t *testing.T) {
	t.Parallel()
	// A workspace: <ws>/repo is the repository, <ws>/shared/kargo-crds the
	// real CRDs when present.
	withShared := t.TempDir()
	root := filepath.Join(withShared, "repo")
	shared := filepath.Join(withShared, "shared", "kargo-crds")
	for _, d := range []string{root, shared} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	bare := filepath.Join(t.TempDir(), "repo")
	if err := os.MkdirAll(bare, 0o750); err != nil {
		t.Fatal(err)
	}
	explicit := t.TempDir()
	standIns := filepath.Join(bare, "test", "crds")

	for _, c := range []struct {
		name     string
		root     string
		env      map[string]string
		wantDir  string
		wantReal bool
		wantErr  string
	}{
		{"CI without the real CRDs fails", bare, map[string]string{"CI": "true"}, "", false, "CI must test against Kargo's real CRDs"},
		{"CI=1 without the real CRDs fails", bare, map[string]string{"CI": "1"}, "", false, filepath.Join(bare, "..", "shared", "kargo-crds") + " is missing"},
		{"a clone outside CI falls back to the stand-ins", bare, nil, standIns, false, ""},
		{"CI=false is outside CI", bare, map[string]string{"CI": "false"}, standIns, false, ""},
		{"CI with the shared CRDs uses them", root, map[string]string{"CI": "true"}, filepath.Join(root, "..", "shared", "kargo-crds"), true, ""},
		{"outside CI the shared CRDs are used too", root, nil, filepath.Join(root, "..", "shared", "kargo-crds"), true, ""},
		{"KARGO_CRDS_DIR wins", root, map[string]string{"CI": "true", "KARGO_CRDS_DIR": explicit}, explicit, true, ""},
		{"a missing KARGO_CRDS_DIR fails", bare, map[string]string{"KARGO_CRDS_DIR": filepath.Join(explicit, "nope")}, "", false, "does not exist"},
		{"CI asking for the stand-ins gets them", bare, map[string]string{"CI": "true", "KARGO_LATCH_STAND_IN_CRDS": "1"}, standIns, false, ""},
		{"asking for the stand-ins beats the shared CRDs", root, map[string]string{"CI": "true", "KARGO_LATCH_STAND_IN_CRDS": "true"}, filepath.Join(root, "test", "crds"), false, ""},
		{"asking for the stand-ins beats KARGO_CRDS_DIR", root, map[string]string{"KARGO_CRDS_DIR": explicit, "KARGO_LATCH_STAND_IN_CRDS": "yes"}, filepath.Join(root, "test", "crds"), false, ""},
		{"KARGO_LATCH_STAND_IN_CRDS=0 asks for nothing", bare, map[string]string{"CI": "true", "KARGO_LATCH_STAND_IN_CRDS": "0"}, "", false, "CI must test against Kargo's real CRDs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, real, err := KargoCRDDir(c.root, func(k string) string { return c.env[k] })
			switch {
			case c.wantErr != "":
				if err == nil || !strings.Contains(err.Error(), c.wantErr) {
					t.Fatalf("got %q, %v, %v; want an error containing %q", dir, real, err, c.wantErr)
				}
			case err != nil:
				t.Fatalf("unexpected error: %v", err)
			case dir != c.wantDir || real != c.wantReal:
				t.Errorf("got %q (real %v), want %q (real %v)", dir, real, c.wantDir, c.wantReal)
			}
		})
	}
}

// TestInCI: what counts as CI.
func TestInCI(t *testing.T) {
	t.Parallel()
	for v, want := range map[string]bool{"": false, "0": false, "false": false, "False": false, "no": false, "true": true, "1": true, "yes": true, "woodpecker": true} {
		if got := InCI(func(string) string { return v }); got != want {
			t.Errorf("CI=%q: InCI %v, want %v", v, got, want)
		}
	}
}
