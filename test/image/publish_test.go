package imagetest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestPublishRefusals: what would publish an image no commit gives, or
// harm files, is refused before anything is built or sent. A checkout
// with an untracked file: `make release` and `make image-push` refuse
// it, and name the file (unless -allow-dirty, ALLOW_DIRTY=1). With a
// toolchain line other than the toolchain that would build: both refuse,
// even with -allow-dirty. A release into a directory that holds anything
// but a previous release: refused, the directory left as it was. A
// version that is not an image tag (it names files): refused by `make
// image` too.
func TestPublishRefusals(t *testing.T) {
	t.Parallel()
	source := checkout(t, "")
	must(t, os.WriteFile(filepath.Join(source, "stray.txt"), []byte("not committed\n"), 0o644))
	out := filepath.Join(t.TempDir(), "release")
	release := []string{"release", "-root", source, "-version", releaseVersion, "-helm", helmBinary(t), "-out", out}
	push := []string{"push", "-root", source, "-image", "127.0.0.1:9/kargo-latch:" + releaseVersion}

	refused(t, hackImage(nil, release...), "stray.txt")
	refused(t, hackImage(nil, push...), "stray.txt")
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a refused release made its directory: %v", err)
	}

	occupied := t.TempDir()
	must(t, os.WriteFile(filepath.Join(occupied, "notes.txt"), []byte("mine\n"), 0o644))
	refused(t, hackImage(nil, "release", "-root", source, "-version", releaseVersion, "-helm", helmBinary(t),
		"-out", occupied, "-allow-dirty"), "not a previous release")
	if diff := cmp.Diff([]string{"notes.txt"}, names(t, occupied)); diff != "" {
		t.Errorf("a refused release changed the directory it was given (-want +got):\n%s", diff)
	}

	refused(t, hackImage(nil, "build", "-root", source, "-version", "../v1", "-out", out), "not an image tag")

	succeed(t, exec.Command("go", "-C", source, "mod", "edit", "-toolchain=go1.26.7"))
	refused(t, hackImage(nil, append(release, "-allow-dirty")...), "go1.26.7")
	refused(t, hackImage(nil, append(push, "-allow-dirty")...), "go1.26.7")
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a refused release or build made %s: %v", out, err)
	}
}

func names(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	must(t, err)
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}
