package imagetest

import (
	"archive/tar"
	"debug/buildinfo"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"

	"github.com/kargo-latch/kargo-latch/hack/image/ociimage"
)

// wantPlatforms are the promised platforms, in the index's order.
var wantPlatforms = []string{"linux/amd64", "linux/arm64"}

// TestImageValidates: the index read back from the layout, and each of its
// images, pass go-containerregistry's validation (every digest, size and
// diff ID recomputed from the blobs on disk); it is an OCI index of the
// promised platforms, annotated with the labels, and index.json names it
// as containerd and Docker look it up.
func TestImageValidates(t *testing.T) {
	t.Parallel()
	must(t, validate.Index(built.index))
	m, err := built.index.IndexManifest()
	must(t, err)
	if m.MediaType != types.OCIImageIndex {
		t.Errorf("index media type %s, want %s", m.MediaType, types.OCIImageIndex)
	}
	var platforms []string
	for _, d := range m.Manifests {
		if d.Platform == nil {
			t.Fatalf("index entry %s has no platform", d.Digest)
		}
		platforms = append(platforms, d.Platform.String())
		if d.MediaType != types.OCIManifestSchema1 {
			t.Errorf("%s: media type %s, want %s", d.Platform, d.MediaType, types.OCIManifestSchema1)
		}
		img, err := built.index.Image(d.Digest)
		must(t, err)
		must(t, validate.Image(img))
	}
	if diff := cmp.Diff(wantPlatforms, platforms); diff != "" {
		t.Errorf("platforms (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(wantLabels(t), m.Annotations); diff != "" {
		t.Errorf("index annotations (-want +got):\n%s", diff)
	}
	wantNames := map[string]string{
		"io.containerd.image.name":          "docker.io/library/" + built.source.Ref(),
		"org.opencontainers.image.ref.name": built.source.Version,
	}
	if diff := cmp.Diff(wantNames, built.entry.Annotations); diff != "" {
		t.Errorf("index.json's names of the image (-want +got):\n%s", diff)
	}
}

// wantLabels are the OCI labels the image must carry, worked out here
// from git and the chart rather than by the builder's code.
func wantLabels(t *testing.T) map[string]string {
	t.Helper()
	head := gitOut(t, "rev-parse", "HEAD")
	if gitOut(t, "status", "--porcelain", "--untracked-files=all") != "" {
		head += "-dirty"
	}
	created := gitOut(t, "log", "-1", "--format=%cd", "--date=format-local:%Y-%m-%dT%H:%M:%SZ", "HEAD")
	if epoch := os.Getenv("SOURCE_DATE_EPOCH"); epoch != "" {
		created = built.source.Created.Format("2006-01-02T15:04:05Z")
	}
	chart, err := ociimage.ReadChartDefaults(built.root)
	must(t, err)
	info, err := buildinfo.ReadFile(hostBinary(t))
	must(t, err)
	return map[string]string{
		ociimage.GoVersionLabel:             info.GoVersion,
		"org.opencontainers.image.source":   "https://github.com/kargo-latch/kargo-latch",
		"org.opencontainers.image.version":  chart.AppVersion,
		"org.opencontainers.image.revision": head,
		"org.opencontainers.image.created":  created,
		"org.opencontainers.image.licenses": ociimage.License,
	}
}

func gitOut(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-C", built.root}, args...)...)
	cmd.Env = append(os.Environ(), "TZ=UTC")
	out, err := cmd.Output()
	must(t, err)
	return strings.TrimSpace(string(out))
}

// forEachPlatform runs fn in a subtest per platform with its image.
func forEachPlatform(t *testing.T, fn func(t *testing.T, p v1.Platform, img v1.Image)) {
	t.Helper()
	for _, p := range ociimage.Platforms {
		t.Run(p.String(), func(t *testing.T) {
			img, err := ociimage.PlatformImage(built.index, p)
			must(t, err)
			fn(t, p, img)
		})
	}
}

// TestImageConfig: each platform's config runs the binary as the numeric
// nonroot user (which Kubernetes' runAsNonRoot accepts without a
// runAsUser), with nothing else: no shell, no command, no environment;
// its platform is its entry's, and its times are the commit's.
func TestImageConfig(t *testing.T) {
	t.Parallel()
	forEachPlatform(t, func(t *testing.T, p v1.Platform, img v1.Image) {
		cfg, err := img.ConfigFile()
		must(t, err)
		want := v1.Config{
			User:       "65532:65532",
			Entrypoint: []string{"/kargo-latch"},
			Labels:     wantLabels(t),
		}
		if diff := cmp.Diff(want, cfg.Config); diff != "" {
			t.Errorf("config (-want +got):\n%s", diff)
		}
		if cfg.OS != p.OS || cfg.Architecture != p.Architecture {
			t.Errorf("config platform %s/%s, want %s", cfg.OS, cfg.Architecture, p)
		}
		uid, err := strconv.Atoi(strings.Split(cfg.Config.User, ":")[0])
		if err != nil || uid == 0 {
			t.Errorf("user %q: runAsNonRoot needs a numeric user other than 0", cfg.Config.User)
		}
		if !cfg.Created.Equal(built.source.Created) {
			t.Errorf("created %s, want the commit's time %s", cfg.Created.Time, built.source.Created)
		}
		for _, h := range cfg.History {
			if !h.Created.Equal(built.source.Created) {
				t.Errorf("history %q created %s, want the commit's time", h.CreatedBy, h.Created.Time)
			}
		}
	})
}

// file is an entry of the root filesystem, as a container sees it.
type file struct {
	Name     string
	Type     byte
	Mode     int64
	UID, GID int
}

// TestImageFiles: the root filesystem holds exactly /etc/passwd and
// /etc/group naming the nonroot user, and the binary, owned by root and
// executable by all, writable by none but root (issue 24); every file dated from the commit. The binary is a static
// ELF executable of the platform's machine: no interpreter, no shared
// library, built without cgo and with -trimpath.
func TestImageFiles(t *testing.T) {
	t.Parallel()
	forEachPlatform(t, func(t *testing.T, p v1.Platform, img v1.Image) {
		hdrs, err := ociimage.Files(img)
		must(t, err)
		var got []file
		for _, h := range hdrs {
			got = append(got, file{h.Name, h.Typeflag, h.Mode, h.Uid, h.Gid})
			if !h.ModTime.Equal(built.source.Created) {
				t.Errorf("%s dated %s, want the commit's time %s", h.Name, h.ModTime, built.source.Created)
			}
		}
		want := []file{
			{"etc", tar.TypeDir, 0o755, 0, 0},
			{"etc/group", tar.TypeReg, 0o644, 0, 0},
			{"etc/passwd", tar.TypeReg, 0o644, 0, 0},
			// Root's, not writable by the user that runs it (65532).
			{"kargo-latch", tar.TypeReg, 0o755, 0, 0},
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("root filesystem (-want +got):\n%s", diff)
		}
		dir := t.TempDir()
		for path, want := range map[string]string{ //nolint:gosec // no credentials: the user databases hold none
			"/etc/passwd": "nonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin\n",
			"/etc/group":  "nonroot:x:65532:\n",
		} {
			dest := filepath.Join(dir, filepath.Base(path))
			must(t, ociimage.ExtractFile(img, path, dest))
			b, err := os.ReadFile(dest)
			must(t, err)
			if string(b) != want {
				t.Errorf("%s is %q, want %q", path, b, want)
			}
		}
		binary := filepath.Join(dir, "kargo-latch")
		must(t, ociimage.ExtractFile(img, "/kargo-latch", binary))
		checkStatic(t, p, binary)
	})
}

// elfMachines are the ELF machines of the platforms.
var elfMachines = map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}

func checkStatic(t *testing.T, p v1.Platform, binary string) {
	t.Helper()
	f, err := elf.Open(binary)
	must(t, err)
	defer func() { _ = f.Close() }()
	if f.Machine != elfMachines[p.Architecture] {
		t.Errorf("ELF machine %s, want %s", f.Machine, elfMachines[p.Architecture])
	}
	if f.Type != elf.ET_EXEC {
		t.Errorf("ELF type %s, want a static executable (%s)", f.Type, elf.ET_EXEC)
	}
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP || prog.Type == elf.PT_DYNAMIC {
			t.Errorf("the binary has a %s program header: it is not static", prog.Type)
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("the binary needs shared libraries %v (%v)", libs, err)
	}
	info, err := buildinfo.ReadFile(binary)
	must(t, err)
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	for k, want := range map[string]string{"CGO_ENABLED": "0", "GOOS": p.OS, "GOARCH": p.Architecture, "-trimpath": "true"} {
		if settings[k] != want {
			t.Errorf("built with %s=%q, want %q", k, settings[k], want)
		}
	}
}

// hostBinary is the image's binary for this machine, extracted once.
var hostBinary = func() func(t *testing.T) string {
	var once sync.Once
	var path string
	var err error
	return func(t *testing.T) string {
		t.Helper()
		once.Do(func() {
			dir := filepath.Join(built.tmp, "host")
			if err = os.Mkdir(dir, 0o750); err == nil {
				path, err = ociimage.ExtractBinary(built.layout, dir)
			}
		})
		must(t, err)
		return path
	}
}()

// TestImageBinaryRuns: the binary for this machine, extracted from the
// image, runs and says the image's version (stamped at link time).
func TestImageBinaryRuns(t *testing.T) {
	t.Parallel()
	binary := hostBinary(t)
	out, err := exec.Command(binary, "version", "--short").CombinedOutput()
	if err != nil {
		t.Fatalf("%s version: %v\n%s", binary, err, out)
	}
	if got := strings.TrimSpace(string(out)); got != built.source.Version {
		t.Errorf("the binary says version %q, want %q", got, built.source.Version)
	}
}
