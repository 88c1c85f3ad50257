// Package imagetest checks the operator's image as `make image` writes it
// (hack/image), read back from disk as a user's tools read it: it
// validates, each platform's config and root filesystem are the promised
// ones, its binary is static and runs, two builds give one digest, it
// survives a push and pull, and a release bundles it with the chart, SBOMs
// and checksums that agree. The e2e suite runs the operator from this
// image's binary.
package imagetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/kargo-latch/kargo-latch/hack/image/ociimage"
)

// built is the image under test.
var built struct {
	root   string
	layout string // the OCI image layout
	// tarball is the tarball written beside it.
	tarball string
	// source is what the image must say it was built from: the current
	// work tree, at the chart's appVersion.
	source ociimage.Source
	index  v1.ImageIndex
	// entry is the index's entry in index.json.
	entry v1.Descriptor
	// tmp is a directory the tests share, removed after them.
	tmp string
}

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	cleanup, err := setUp()
	if err != nil {
		fmt.Fprintln(os.Stderr, "image tests:", err)
		return 1
	}
	defer cleanup()
	return m.Run()
}

// setUp finds the image, and returns what removes it if it built it, and
// the shared temporary directory.
func setUp() (cleanup func(), err error) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		return nil, err
	}
	layout, removeLayout, err := ociimage.LayoutForTests(context.Background(), root)
	if err != nil {
		return nil, err
	}
	built.root, built.layout = root, layout
	if built.tmp, err = os.MkdirTemp("", "kargo-latch-image-tests-"); err != nil {
		removeLayout()
		return nil, err
	}
	cleanup = func() {
		removeLayout()
		_ = os.RemoveAll(built.tmp)
	}
	if built.source, err = ociimage.ReadSource(context.Background(), root, ""); err != nil {
		cleanup()
		return nil, err
	}
	built.tarball = filepath.Join(filepath.Dir(layout), ociimage.TarballName(built.source.Version))
	if built.index, built.entry, err = ociimage.ReadLayout(layout); err != nil {
		cleanup()
		return nil, err
	}
	return cleanup, nil
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
