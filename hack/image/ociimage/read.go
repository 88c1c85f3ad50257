package ociimage

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

// ReadLayout reads back the image index a layout written by Write holds,
// and its entry in index.json (with the annotations that name it).
func ReadLayout(layoutDir string) (v1.ImageIndex, v1.Descriptor, error) {
	root, err := layout.ImageIndexFromPath(layoutDir)
	if err != nil {
		return nil, v1.Descriptor{}, err
	}
	m, err := root.IndexManifest()
	if err != nil {
		return nil, v1.Descriptor{}, err
	}
	if len(m.Manifests) != 1 {
		return nil, v1.Descriptor{}, fmt.Errorf("%s: index.json lists %d entries, want the one image index", layoutDir, len(m.Manifests))
	}
	desc := m.Manifests[0]
	idx, err := root.ImageIndex(desc.Digest)
	if err != nil {
		return nil, v1.Descriptor{}, err
	}
	return idx, desc, nil
}

// PlatformImage is idx's image for p.
func PlatformImage(idx v1.ImageIndex, p v1.Platform) (v1.Image, error) {
	m, err := idx.IndexManifest()
	if err != nil {
		return nil, err
	}
	for _, d := range m.Manifests {
		if d.Platform != nil && d.Platform.Equals(p) {
			return idx.Image(d.Digest)
		}
	}
	return nil, fmt.Errorf("the image has no %s", p)
}

// Files are the entries of img's root filesystem, in the layers' order.
func Files(img v1.Image) ([]*tar.Header, error) {
	var hdrs []*tar.Header
	err := walk(img, func(hdr *tar.Header, _ io.Reader) error {
		hdrs = append(hdrs, hdr)
		return nil
	})
	return hdrs, err
}

// ExtractFile writes the file at path (absolute, as in the image) of img's
// root filesystem to dest, with its mode.
func ExtractFile(img v1.Image, path, dest string) error {
	found := false
	err := walk(img, func(hdr *tar.Header, r io.Reader) error {
		if "/"+strings.TrimPrefix(hdr.Name, "./") != path || hdr.Typeflag != tar.TypeReg {
			return nil
		}
		found = true
		f, err := os.OpenFile(dest, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, hdr.FileInfo().Mode().Perm())
		if err != nil {
			return err
		}
		if _, err := io.Copy(f, r); err != nil {
			_ = f.Close()
			return err
		}
		return f.Close()
	})
	if err == nil && !found {
		err = fmt.Errorf("the image has no file %s", path)
	}
	return err
}

// walk calls fn with each entry of img's flattened root filesystem.
func walk(img v1.Image, fn func(*tar.Header, io.Reader) error) (err error) {
	rc := mutate.Extract(img)
	defer func() {
		if cerr := rc.Close(); err == nil {
			err = cerr
		}
	}()
	tr := tar.NewReader(rc)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := fn(hdr, tr); err != nil {
			return err
		}
	}
}

// HostPlatform is the image's platform this machine runs.
func HostPlatform() v1.Platform { return v1.Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH} }

// ExtractBinary extracts the operator's binary for this machine's platform
// from the layout into dir, and returns its path: what a container of the
// image runs, to run without a container engine.
func ExtractBinary(layoutDir, dir string) (string, error) {
	idx, _, err := ReadLayout(layoutDir)
	if err != nil {
		return "", err
	}
	img, err := PlatformImage(idx, HostPlatform())
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, filepath.Base(Entrypoint))
	return path, ExtractFile(img, Entrypoint, path)
}

// CompressedSize is what pulling img transfers: its manifest, its config
// and its compressed layers.
func CompressedSize(img v1.Image) (int64, error) {
	raw, err := img.RawManifest()
	if err != nil {
		return 0, err
	}
	m, err := img.Manifest()
	if err != nil {
		return 0, err
	}
	total := int64(len(raw)) + m.Config.Size
	for _, l := range m.Layers {
		total += l.Size
	}
	return total, nil
}

// LayoutEnv names the environment variable through which the Makefile
// hands the tests the layout `make image` just wrote, so that they check
// that one and build none.
const LayoutEnv = "KARGO_LATCH_IMAGE"

// LayoutForTests is the image layout tests check: $KARGO_LATCH_IMAGE, else
// one `go run ./hack/image build` writes now under a new temporary
// directory, which cleanup removes.
func LayoutForTests(ctx context.Context, root string) (layoutDir string, cleanup func(), err error) {
	if dir := os.Getenv(LayoutEnv); dir != "" {
		return dir, func() {}, nil
	}
	out, err := os.MkdirTemp("", "kargo-latch-image-test-")
	if err != nil {
		return "", nil, err
	}
	cleanup = func() { _ = os.RemoveAll(out) }
	if err := RunBuild(ctx, root, out); err != nil {
		cleanup()
		return "", nil, err
	}
	return filepath.Join(out, LayoutDir), cleanup, nil
}

// RunBuild runs `go run ./hack/image build -out out` in root: the image of
// `make image`, written under out. env is added to this process's
// environment.
func RunBuild(ctx context.Context, root, out string, env ...string) error {
	cmd := exec.CommandContext(ctx, "go", "run", "./hack/image", "build", "-out", out)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go run ./hack/image build: %w\n%s", err, b)
	}
	return nil
}
