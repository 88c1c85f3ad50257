package ociimage

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// CheckLayoutIsTree checks that the image of the layout at layoutDir is
// what the work tree at root builds now, and returns the sha256 of its
// binary for this machine's platform: its revision label is the tree's
// (with -dirty if the tree has changes), and that binary is byte for byte
// the one a build of the tree gives (a relink, with the build cache `make
// image` left). A layout written before the last change, or before
// switching branches, fails here rather than be tested in the tree's
// stead.
func CheckLayoutIsTree(ctx context.Context, root, layoutDir string) (string, error) {
	idx, _, err := ReadLayout(layoutDir)
	if err != nil {
		return "", err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return "", err
	}
	src, err := ReadSource(ctx, root, m.Annotations[VersionLabel])
	if err != nil {
		return "", err
	}
	stale := fmt.Sprintf("the image in %s is not what the tree at %s builds (build it again: `make image-for-tests` writes the tests' image; or unset %s): ", layoutDir, root, LayoutEnv)
	if rev := m.Annotations[RevisionLabel]; rev != src.Revision {
		return "", fmt.Errorf("%sits revision is %s, the tree's %s", stale, rev, src.Revision)
	}
	img, err := PlatformImage(idx, HostPlatform())
	if err != nil {
		return "", err
	}
	inImage, err := FileSHA256InImage(img, Entrypoint)
	if err != nil {
		return "", err
	}
	dir, err := os.MkdirTemp("", "kargo-latch-tree-")
	if err != nil {
		return "", err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	fresh := filepath.Join(dir, "kargo-latch")
	if err := BuildBinary(ctx, src, HostPlatform(), fresh); err != nil {
		return "", err
	}
	built, err := FileSHA256(fresh)
	if err != nil {
		return "", err
	}
	if built != inImage {
		return "", fmt.Errorf("%sits %s binary has sha256 %s, a build of the tree %s", stale, HostPlatform(), inImage, built)
	}
	return inImage, nil
}

// FileSHA256InImage is the hex sha256 of the regular file at path
// (absolute, as in the image) of img's root filesystem.
func FileSHA256InImage(img v1.Image, path string) (string, error) {
	var sum string
	err := walk(img, func(hdr *tar.Header, r io.Reader) error {
		if "/"+strings.TrimPrefix(hdr.Name, "./") != path || hdr.Typeflag != tar.TypeReg {
			return nil
		}
		h := sha256.New()
		if _, err := io.Copy(h, r); err != nil {
			return err
		}
		sum = hex.EncodeToString(h.Sum(nil))
		return nil
	})
	if err == nil && sum == "" {
		err = fmt.Errorf("the image has no file %s", path)
	}
	return sum, err
}
