package imagetest

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/kargo-latch/kargo-latch/hack/image/ociimage"
)

// TestTwoBuildsGiveOneDigest: a second `make image` of the same commit
// gives the same index digest and a byte-identical tarball, though it is
// made later, from another checkout of the commit, into another
// directory, checked out and built with umask 077, in another time zone,
// and with a go env file (what `go env -w` writes) that sets
// GOFLAGS=-tags=x and GOFIPS140=latest, each of which changes a binary.
// Skipped when the work tree has changes: a checkout of the commit does
// not hold them.
func TestTwoBuildsGiveOneDigest(t *testing.T) {
	t.Parallel()
	if built.source.Dirty() {
		t.Skipf("the work tree has changes (%s): a checkout of HEAD builds another image", built.source.Changes[0])
	}
	goEnv := filepath.Join(t.TempDir(), "go.env")
	must(t, os.WriteFile(goEnv, []byte("GOFLAGS=-tags=x\nGOFIPS140=latest\n"), 0o644))
	source := checkout(t, "077")
	out := t.TempDir()
	cmd := withUmask(hackImage([]string{"GOENV=" + goEnv, "TZ=Pacific/Kiritimati"}, "build", "-root", source, "-out", out), "077")
	// The go env file speaks for these, not the test's environment.
	cmd.Env = slices.DeleteFunc(cmd.Env, func(kv string) bool {
		return strings.HasPrefix(kv, "GOFLAGS=") || strings.HasPrefix(kv, "GOFIPS140=")
	})
	succeed(t, cmd)

	again, _, err := ociimage.ReadLayout(filepath.Join(out, ociimage.LayoutDir))
	must(t, err)
	first, err := built.index.Digest()
	must(t, err)
	second, err := again.Digest()
	must(t, err)
	if first != second {
		t.Errorf("two builds of one commit: index %s, then %s", first, second)
	}
	a, err := ociimage.FileSHA256(built.tarball)
	must(t, err)
	b, err := ociimage.FileSHA256(filepath.Join(out, ociimage.TarballName(built.source.Version)))
	must(t, err)
	if a != b {
		t.Errorf("two builds of one commit: tarballs of sha256 %s, then %s", a, b)
	}
}

// TestImageIsTheTree: the image under test is what the work tree builds
// now: its revision label is the tree's and its binary for this machine
// is the one a build of the tree gives. A layout left from an earlier
// commit would otherwise be tested in the tree's stead.
func TestImageIsTheTree(t *testing.T) {
	t.Parallel()
	_, err := ociimage.CheckLayoutIsTree(context.Background(), built.root, built.layout)
	must(t, err)
}

// TestTarballLoads: the tarball is what both of Docker's image stores and
// containerd (kind) load. Its OCI layout holds the very index of the
// layout beside it, which is what containerd and Docker's containerd store
// import; its manifest.json, which Docker's classic store reads, names the
// linux/amd64 image by the chart's default image, and reads back as a
// valid image with that image's config and layers.
func TestTarballLoads(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	untar(t, built.tarball, dir)
	idx, entry, err := ociimage.ReadLayout(dir)
	must(t, err)
	got, err := idx.Digest()
	must(t, err)
	want, err := built.index.Digest()
	must(t, err)
	if got != want {
		t.Errorf("the tarball's OCI layout holds index %s, the layout %s", got, want)
	}
	if diff := cmp.Diff(built.entry, entry); diff != "" {
		t.Errorf("the tarball's index.json entry differs from the layout's (-layout +tarball):\n%s", diff)
	}

	b, err := os.ReadFile(filepath.Join(dir, "manifest.json"))
	must(t, err)
	var legacy []struct{ RepoTags []string }
	must(t, json.Unmarshal(b, &legacy))
	if len(legacy) != 1 || len(legacy[0].RepoTags) != 1 || legacy[0].RepoTags[0] != built.source.Ref() {
		t.Fatalf("manifest.json names %+v, want the one image %s", legacy, built.source.Ref())
	}
	tag, err := name.NewTag(built.source.Ref())
	must(t, err)
	img, err := tarball.ImageFromPath(built.tarball, &tag)
	must(t, err)
	must(t, validate.Image(img))
	amd64, err := ociimage.PlatformImage(built.index, ociimage.Platforms[0])
	must(t, err)
	if diff := cmp.Diff(blobsOf(t, amd64), blobsOf(t, img)); diff != "" {
		t.Errorf("manifest.json's image is not the linux/amd64 image (-linux/amd64 +manifest.json):\n%s", diff)
	}
}

// blobsOf are the digests of img's config and layers.
func blobsOf(t *testing.T, img v1.Image) []string {
	t.Helper()
	cfg, err := img.ConfigName()
	must(t, err)
	layers, err := img.Layers()
	must(t, err)
	blobs := []string{"config " + cfg.String()}
	for _, l := range layers {
		d, err := l.Digest()
		must(t, err)
		blobs = append(blobs, "layer "+d.String())
	}
	return blobs
}

// untar extracts a tar of regular files and directories into dir.
func untar(t *testing.T, path, dir string) {
	t.Helper()
	f, err := os.Open(path)
	must(t, err)
	defer func() { _ = f.Close() }()
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return
		}
		must(t, err)
		dest := filepath.Join(dir, filepath.FromSlash(hdr.Name))
		switch hdr.Typeflag {
		case tar.TypeDir:
			must(t, os.MkdirAll(dest, 0o750))
		case tar.TypeReg:
			body, err := io.ReadAll(tr)
			must(t, err)
			must(t, os.WriteFile(dest, body, 0o644))
		default:
			t.Fatalf("%s: unexpected entry type %c", hdr.Name, hdr.Typeflag)
		}
	}
}
