package ociimage

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
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

// Release writes the release of src into outDir, emptied first: the image
// layout and tarball, the chart packaged by helm with appVersion and
// version from src.Version, the SBOM of each platform's binary, and
// checksums.txt over every other file. It needs no network.
func Release(ctx context.Context, src Source, outDir, helm string) (v1.Hash, error) {
	chartVersion, err := ChartVersion(src.Version)
	if err != nil {
		return v1.Hash{}, err
	}
	if err := os.RemoveAll(outDir); err != nil {
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
	cmd := exec.CommandContext(ctx, helm, "package", filepath.Join(src.Root, ChartPath),
		"--version", chartVersion, "--app-version", src.Version, "--destination", outDir)
	// helm's own files (repositories, cache) stay out of the user's.
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+filepath.Join(work, "helm", "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(work, "helm", "config"), "HELM_DATA_HOME="+filepath.Join(work, "helm", "data"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return v1.Hash{}, fmt.Errorf("helm package: %w\n%s", err, out)
	}
	return digest, WriteChecksums(outDir)
}

// WriteChecksums writes dir's checksums.txt: the sha256 of every other
// file under dir, by path relative to it, in path order, as `sha256sum`
// prints them (and `sha256sum -c` reads them).
func WriteChecksums(dir string) error {
	var lines []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(dir, path)
		if err != nil || rel == ChecksumsName {
			return err
		}
		sum, err := FileSHA256(path)
		if err != nil {
			return err
		}
		lines = append(lines, sum+"  "+filepath.ToSlash(rel)+"\n")
		return nil
	})
	if err != nil {
		return err
	}
	slices.Sort(lines)
	return os.WriteFile(filepath.Join(dir, ChecksumsName), []byte(strings.Join(lines, "")), 0o644)
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
