package ociimage

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// ChecksumsName is the release's checksum file, in sha256sum's format.
const ChecksumsName = "checksums.txt"

// releaseVersion is a release's version: a SemVer with a leading v. The
// chart's version is the same without the v.
var releaseVersion = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$`)

// ChartVersion is the chart's version for a release version (v1.2.3 →
// 1.2.3), or an error for a version that is not a release's.
func ChartVersion(version string) (string, error) {
	if !releaseVersion.MatchString(version) {
		return "", fmt.Errorf("the release version %q is not vMAJOR.MINOR.PATCH[-PRERELEASE]", version)
	}
	return strings.TrimPrefix(version, "v"), nil
}

// ChartName is the packaged chart's file name, as `helm package` names it.
func ChartName(version string) string {
	v, _ := ChartVersion(version)
	return "kargo-latch-" + v + ".tgz"
}

// ReleaseDir is where a release of version goes by default, under the
// repository's dist/: a directory of its own, which neither `make image`
// nor the tests write.
func ReleaseDir(root, version string) string {
	return filepath.Join(root, "dist", "release-"+version)
}

// Release writes the release of src into outDir: the image layout and
// tarball, the chart packaged by helm with appVersion and version from
// src.Version, the SBOM of each platform's binary, and checksums.txt over
// every other file. outDir must be missing, empty, or a previous release
// (which it replaces); anything else is refused before anything is built.
// It needs no network.
func Release(ctx context.Context, src Source, outDir, helm string) (v1.Hash, error) {
	chartVersion, err := ChartVersion(src.Version)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := clearReleaseDir(outDir); err != nil {
		return v1.Hash{}, err
	}
	work, err := os.MkdirTemp("", "kargo-latch-release-")
	if err != nil {
		return v1.Hash{}, err
	}
	defer func() { _ = os.RemoveAll(work) }()
	img, err := Build(ctx, src, work)
	if err != nil {
		return v1.Hash{}, err
	}
	digest, err := Write(img, filepath.Join(outDir, LayoutDir), filepath.Join(outDir, TarballName(src.Version)))
	if err != nil {
		return v1.Hash{}, err
	}
	for _, p := range Platforms {
		sbom, err := SBOM(src, p, img.Binaries[p.String()])
		if err != nil {
			return v1.Hash{}, err
		}
		if err := os.WriteFile(filepath.Join(outDir, SBOMName(src.Version, p)), sbom, 0o644); err != nil {
			return v1.Hash{}, err
		}
	}
	packaged := filepath.Join(work, "chart")
	cmd := exec.CommandContext(ctx, helm, "package", filepath.Join(src.Root, ChartPath),
		"--version", chartVersion, "--app-version", src.Version, "--destination", packaged)
	// helm's own files (repositories, cache) stay out of the user's.
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(work, "helm", "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(work, "helm", "config"), "HELM_DATA_HOME="+filepath.Join(work, "helm", "data"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return v1.Hash{}, fmt.Errorf("helm package: %w\n%s", err, out)
	}
	name := ChartName(src.Version)
	if err := normalizeChart(filepath.Join(packaged, name), filepath.Join(outDir, name), src.Created); err != nil {
		return v1.Hash{}, err
	}
	return digest, WriteChecksums(outDir)
}

// clearReleaseDir makes dir an empty directory, if it is missing, empty,
// or a previous release: its files are checksums.txt and those it lists.
// Any other directory is refused, and left as it is: `-out .` or a typo
// must not delete someone's files.
func clearReleaseDir(dir string) error {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && len(entries) == 0) {
		return os.MkdirAll(dir, 0o755) //nolint:gosec // a release is published
	}
	if err != nil {
		return err
	}
	if err := isRelease(dir); err != nil {
		return fmt.Errorf("%s is not empty and is not a previous release (%w): give an empty or new directory", dir, err)
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.MkdirAll(dir, 0o755) //nolint:gosec // a release is published
}

// isRelease says why dir is not a release: checksums.txt is missing, or
// lists not every other file, or something under dir is not a regular
// file or directory.
func isRelease(dir string) error {
	sums, err := ReadChecksums(filepath.Join(dir, ChecksumsName))
	if err != nil {
		return err
	}
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == ChecksumsName {
			return err
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s is not a regular file", rel)
		}
		if _, ok := sums[filepath.ToSlash(rel)]; !ok {
			return fmt.Errorf("%s lists no %s", ChecksumsName, rel)
		}
		return nil
	})
}

// WriteChecksums writes dir's checksums.txt: the sha256 of every other
// file under dir, by path relative to it, in path order, as `sha256sum`
// prints them (and `sha256sum -c` reads them).
func WriteChecksums(dir string) error {
	type sum struct{ path, hash string }
	var sums []sum
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == ChecksumsName {
			return err
		}
		hash, err := FileSHA256(path)
		if err != nil {
			return err
		}
		sums = append(sums, sum{filepath.ToSlash(rel), hash})
		return nil
	})
	if err != nil {
		return err
	}
	slices.SortFunc(sums, func(a, b sum) int { return strings.Compare(a.path, b.path) })
	var b strings.Builder
	for _, s := range sums {
		b.WriteString(s.hash + "  " + s.path + "\n")
	}
	return os.WriteFile(filepath.Join(dir, ChecksumsName), []byte(b.String()), 0o644)
}

// ReadChecksums reads a checksums.txt: the sha256 of each path.
func ReadChecksums(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer func() { _ = f.Close() }()
	sums := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		sum, file, ok := strings.Cut(sc.Text(), "  ")
		if !ok || len(sum) != sha256.Size*2 {
			return nil, fmt.Errorf("%s: not a sha256sum line: %q", path, sc.Text())
		}
		sums[file] = sum
	}
	return sums, sc.Err()
}

// FileSHA256 is the hex sha256 of a file's content.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
