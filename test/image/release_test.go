package imagetest

import (
	"context"
	"debug/buildinfo"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/v1/validate"
	"sigs.k8s.io/yaml"

	"github.com/kargo-latch/kargo-latch/hack/image/ociimage"
)

// TestReleaseBundle: `make release VERSION=…` writes the image layout
// and tarball, the chart packaged by helm, one SBOM per platform and
// checksums.txt, and nothing else; the checksums cover every other file
// and verify; the packaged chart installs by default the image the bundle
// holds, whose every platform is labelled with the release's version; and
// each SBOM describes the binary of its platform in the image: its sha256,
// and every module the Go linker recorded in it.
func TestReleaseBundle(t *testing.T) {
	t.Parallel()
	const version = "v0.0.0-test.1"
	out := t.TempDir()
	cmd := exec.CommandContext(context.Background(), "go", "run", "./hack/image", "release",
		"-version", version, "-out", out, "-helm", helmBinary(t))
	cmd.Dir = built.root
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go run ./hack/image release: %v\n%s", err, b)
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
	labelled := []string{"index " + m.Annotations["org.opencontainers.image.version"]}
	for _, p := range ociimage.Platforms {
		img, err := ociimage.PlatformImage(idx, p)
		must(t, err)
		cfg, err := img.ConfigFile()
		must(t, err)
		labelled = append(labelled, p.String()+" "+cfg.Config.Labels["org.opencontainers.image.version"])
		binary := filepath.Join(t.TempDir(), "kargo-latch")
		must(t, ociimage.ExtractFile(img, "/kargo-latch", binary))
		checkSBOM(t, filepath.Join(out, ociimage.SBOMName(version, p)), binary, version)
	}
	if diff := cmp.Diff([]string{"index " + version, "linux/amd64 " + version, "linux/arm64 " + version}, labelled); diff != "" {
		t.Errorf("the release's image version labels (-want +got):\n%s", diff)
	}

	chart := filepath.Join(out, "kargo-latch-0.0.0-test.1.tgz")
	var meta struct{ Version, AppVersion string }
	must(t, yaml.Unmarshal(runHelm(t, "show", "chart", chart), &meta))
	if meta.Version != "0.0.0-test.1" || meta.AppVersion != version {
		t.Errorf("the packaged chart is version %q, appVersion %q; want 0.0.0-test.1 and %s", meta.Version, meta.AppVersion, version)
	}
	image := deploymentImage(t, chart)
	if named := entry.Annotations["io.containerd.image.name"]; named != "docker.io/library/"+image {
		t.Errorf("the packaged chart installs %s by default; the bundle's image is named %s", image, named)
	}
	if want := "kargo-latch:" + version; image != want {
		t.Errorf("the packaged chart installs %s by default, want %s", image, want)
	}
}

// checkChecksums: checksums.txt lists every other file under dir, and
// each file has the listed sha256.
func checkChecksums(t *testing.T, dir string) {
	t.Helper()
	sums, err := ociimage.ReadChecksums(filepath.Join(dir, "checksums.txt"))
	must(t, err)
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

// checkSBOM: the SBOM names the binary by its sha256 and the release's
// version, and lists the toolchain's standard library and every module
// of the binary's build information at its version, and no other.
func checkSBOM(t *testing.T, path, binary, version string) {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	var doc ociimage.SPDX
	must(t, json.Unmarshal(b, &doc))
	if doc.SPDXVersion != "SPDX-2.3" || len(doc.Packages) == 0 {
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
}
