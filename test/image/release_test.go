package imagetest

import (
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	"sigs.k8s.io/yaml"

	"github.com/kargo-latch/kargo-latch/hack/image/ociimage"
)

// releaseVersion is the version the tests release.
const releaseVersion = "v0.0.0-test.1"

// TestReleaseBundle: `make release VERSION=…` of a clean checkout writes,
// into dist/release-VERSION/, the image layout and tarball, the chart
// packaged by helm, one SBOM per platform and checksums.txt, and nothing
// else; the checksums cover every other file, in path order, and verify;
// the packaged chart installs by default the image the bundle holds, whose
// every platform is labelled with the release's version and the Go
// toolchain its binary records; and each SBOM describes the binary of its
// platform in the image: its sha256, its commit, and every module the Go
// linker recorded in it. Then `make image` in the same checkout leaves
// the release as it was, and a second release of the commit, later,
// replaces it with the very same files.
func TestReleaseBundle(t *testing.T) {
	t.Parallel()
	source := checkout(t, "")
	release := []string{"release", "-root", source, "-version", releaseVersion, "-helm", helmBinary(t)}
	said := succeed(t, hackImage(nil, release...))
	// The release says where it went; the rest of the test looks there.
	var out string
	if _, after, ok := strings.Cut(said, " in "); ok {
		out, _, _ = strings.Cut(after, ": ")
	}
	if want := filepath.Join(source, "dist", "release-"+releaseVersion); out != want {
		t.Errorf("the release went to %q, want %s", out, want)
	}

	wantFiles := []string{
		"checksums.txt", "image/", "kargo-latch-0.0.0-test.1.tgz", "kargo-latch-image-v0.0.0-test.1.tar",
		"kargo-latch-v0.0.0-test.1.linux-amd64.spdx.json", "kargo-latch-v0.0.0-test.1.linux-arm64.spdx.json",
	}
	entries, err := os.ReadDir(out)
	must(t, err)
	var files []string
	for _, e := range entries {
		files = append(files, e.Name()+map[bool]string{true: "/"}[e.IsDir()])
	}
	if diff := cmp.Diff(wantFiles, files); diff != "" {
		t.Errorf("the release's files (-want +got):\n%s", diff)
	}
	checkChecksums(t, out)

	idx, entry, err := ociimage.ReadLayout(filepath.Join(out, "image"))
	must(t, err)
	must(t, validate.Index(idx))
	m, err := idx.IndexManifest()
	must(t, err)
	revision := strings.TrimSpace(succeed(t, exec.Command("git", "-C", source, "rev-parse", "HEAD")))
	labelled := []string{"index " + m.Annotations["org.opencontainers.image.version"]}
	for _, p := range ociimage.Platforms {
		img, err := ociimage.PlatformImage(idx, p)
		must(t, err)
		cfg, err := img.ConfigFile()
		must(t, err)
		binary := filepath.Join(t.TempDir(), "kargo-latch")
		must(t, ociimage.ExtractFile(img, "/kargo-latch", binary))
		info, err := buildinfo.ReadFile(binary)
		must(t, err)
		labels := cfg.Config.Labels
		labelled = append(labelled, fmt.Sprintf("%s %s %s %s", p, labels["org.opencontainers.image.version"],
			labels["org.opencontainers.image.revision"], labels[ociimage.GoVersionLabel]))
		if labels[ociimage.GoVersionLabel] != info.GoVersion {
			t.Errorf("%s: the image says it was built with %q, its binary %s", p, labels[ociimage.GoVersionLabel], info.GoVersion)
		}
		checkSBOM(t, filepath.Join(out, ociimage.SBOMName(releaseVersion, p)), binary, releaseVersion, revision)
	}
	goVersion := m.Annotations[ociimage.GoVersionLabel]
	if diff := cmp.Diff([]string{
		"index " + releaseVersion,
		"linux/amd64 " + releaseVersion + " " + revision + " " + goVersion,
		"linux/arm64 " + releaseVersion + " " + revision + " " + goVersion,
	}, labelled); diff != "" {
		t.Errorf("the release's image labels (-want +got):\n%s", diff)
	}

	chart := filepath.Join(out, "kargo-latch-0.0.0-test.1.tgz")
	var meta struct{ Version, AppVersion string }
	must(t, yaml.Unmarshal(runHelm(t, "show", "chart", chart), &meta))
	if meta.Version != "0.0.0-test.1" || meta.AppVersion != releaseVersion {
		t.Errorf("the packaged chart is version %q, appVersion %q; want 0.0.0-test.1 and %s", meta.Version, meta.AppVersion, releaseVersion)
	}
	image := deploymentImage(t, chart)
	if named := entry.Annotations["io.containerd.image.name"]; named != "docker.io/library/"+image {
		t.Errorf("the packaged chart installs %s by default; the bundle's image is named %s", image, named)
	}
	if want := "kargo-latch:" + releaseVersion; image != want {
		t.Errorf("the packaged chart installs %s by default, want %s", image, want)
	}

	// make image writes dist/image and its tarball, beside the release.
	succeed(t, hackImage(nil, "build", "-root", source))
	if _, err := os.Stat(filepath.Join(source, "dist", ociimage.LayoutDir, "index.json")); err != nil {
		t.Errorf("make image wrote no dist/image: %v", err)
	}
	checkChecksums(t, out)

	// A release of the same commit, later, into the previous one.
	first, err := os.ReadFile(filepath.Join(out, ociimage.ChecksumsName))
	must(t, err)
	succeed(t, hackImage(nil, release...))
	second, err := os.ReadFile(filepath.Join(out, ociimage.ChecksumsName))
	must(t, err)
	if diff := cmp.Diff(string(first), string(second)); diff != "" {
		t.Errorf("two releases of one commit differ (-first +second checksums.txt):\n%s", diff)
	}
	checkChecksums(t, out)
}

// checkChecksums: checksums.txt lists every other file under dir, and
// each file has the listed sha256.
func checkChecksums(t *testing.T, dir string) {
	t.Helper()
	sums, err := ociimage.ReadChecksums(filepath.Join(dir, "checksums.txt"))
	must(t, err)
	b, err := os.ReadFile(filepath.Join(dir, "checksums.txt"))
	must(t, err)
	var inOrder []string
	for line := range strings.Lines(string(b)) {
		_, path, _ := strings.Cut(strings.TrimSuffix(line, "\n"), "  ")
		inOrder = append(inOrder, path)
	}
	if !slices.IsSorted(inOrder) {
		t.Errorf("checksums.txt is not in path order: %v", inOrder)
	}
	var listed, found []string
	for f := range sums {
		listed = append(listed, f)
	}
	must(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		if rel == "checksums.txt" {
			return nil
		}
		found = append(found, filepath.ToSlash(rel))
		sum, err := ociimage.FileSHA256(path)
		if err == nil && sums[filepath.ToSlash(rel)] != sum {
			t.Errorf("%s has sha256 %s; checksums.txt says %q", rel, sum, sums[filepath.ToSlash(rel)])
		}
		return err
	}))
	slices.Sort(listed)
	slices.Sort(found)
	if diff := cmp.Diff(found, listed); diff != "" {
		t.Errorf("checksums.txt lists (-files +listed):\n%s", diff)
	}
	if len(found) < 6 {
		t.Errorf("the release has %d files: %v", len(found), found)
	}
}

// checkSBOM: the SBOM names the binary by its sha256, the release's
// version and its commit, and lists the toolchain's standard library (its
// purl with the version alone, 1.26.8) and every module of the binary's
// build information at its version, and no other.
func checkSBOM(t *testing.T, path, binary, version, revision string) {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	var doc ociimage.SPDX
	must(t, json.Unmarshal(b, &doc))
	if doc.SPDXVersion != "SPDX-2.3" || len(doc.Packages) < 2 {
		t.Fatalf("%s: not an SPDX 2.3 document with packages", path)
	}
	info, err := buildinfo.ReadFile(binary)
	must(t, err)
	sum, err := ociimage.FileSHA256(binary)
	must(t, err)
	want := []string{info.Main.Path + "@" + version + " sha256:" + sum, "stdlib@" + info.GoVersion}
	for _, d := range info.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		want = append(want, d.Path+"@"+d.Version)
	}
	var got []string
	for i, p := range doc.Packages {
		s := p.Name + "@" + p.VersionInfo
		if i == 0 && len(p.Checksums) == 1 {
			s += " sha256:" + p.Checksums[0].ChecksumValue
		}
		got = append(got, s)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("%s lists (-the binary's build information +SBOM):\n%s", filepath.Base(path), diff)
	}
	if len(info.Deps) < 10 {
		t.Errorf("the binary's build information lists %d modules: is it the operator?", len(info.Deps))
	}
	if want := "git+https://github.com/kargo-latch/kargo-latch@" + revision; doc.Packages[0].DownloadLocation != want {
		t.Errorf("%s: the binary's download location is %q, want %q", filepath.Base(path), doc.Packages[0].DownloadLocation, want)
	}
	stdlibPurl := "pkg:golang/stdlib@" + strings.TrimPrefix(info.GoVersion, "go")
	if refs := doc.Packages[1].ExternalRefs; len(refs) != 1 || refs[0].ReferenceLocator != stdlibPurl {
		t.Errorf("%s: the standard library's purls are %+v, want %s", filepath.Base(path), refs, stdlibPurl)
	}
}
