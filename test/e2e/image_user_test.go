package e2e

import (
	"os"
	"os/exec"
	"testing"
)

// TestImageUserProbe: where the image's user may not reach the tests'
// temporary files (TMPDIR under a directory only root enters), the probe
// says so, and the Helm tests run the operator as their own user rather
// than fail; where it may, the probe passes and they run it as the image's.
func TestImageUserProbe(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only tests run as root run the operator as the image's user")
	}
	t.Parallel()
	binary, err := exec.LookPath("true")
	must(t, err)
	for _, tc := range []struct {
		mode   os.FileMode
		usable bool
	}{{0o755, true}, {0o700, false}} {
		tmp, err := os.MkdirTemp("", "kargo-latch-tmpdir-")
		must(t, err)
		t.Cleanup(func() { _ = os.RemoveAll(tmp) })
		must(t, os.Chmod(tmp, tc.mode))
		err = probeImageUser(binary, tmp)
		t.Logf("TMPDIR of mode %v: %v", tc.mode, err)
		if usable := err == nil; usable != tc.usable {
			t.Errorf("TMPDIR of mode %v: the image's user is usable: %v, want %v (%v)", tc.mode, usable, tc.usable, err)
		}
	}
}
