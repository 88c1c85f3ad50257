// Package ociimage builds kargo-latch's container image with Go alone (no
// container engine): the static binary cross-compiled for each platform,
// FROM scratch with a nonroot user, written as an OCI image layout and a
// tarball that `docker load` and `kind load image-archive` accept, pushed
// with the usual docker credentials, and bundled into a release with the
// chart, an SBOM and checksums. The command hack/image and the tests share
// it, so that what the tests check is what `make image` ships.
//
// Everything in an image is a function of the commit: the binaries are
// built with -trimpath from a clean environment, every time (the config's
// created, the layer's file times) is the commit's, and files, layers and
// platforms come in a fixed order, and the Go settings that change a
// binary are fixed whatever the environment or the go env file says. Two
// builds of one commit with one Go toolchain give one digest.
package ociimage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"
)

// Source is what an image is built from and stamped with.
type Source struct {
	// Root is the repository's root.
	Root string
	// Version is the image's tag, its version label and the binary's
	// main.version.
	Version string
	// Revision is the commit, with "-dirty" when the work tree differs
	// from it: such a build is not what the commit alone gives.
	Revision string
	// Changes are the work tree's changes (git status --porcelain), when
	// it has any.
	Changes []string
	// Created is the commit's time, or SOURCE_DATE_EPOCH when set: the
	// config's created time, the created label and every file's time.
	Created time.Time
	// Repository is the image's name without a tag: the chart's default
	// image.repository.
	Repository string
	// GoVersion is the toolchain the build uses ("go1.26.8"); Toolchain
	// is the one go.mod's toolchain line names, "" if none.
	GoVersion, Toolchain string
}

// Ref is the image's name and tag, as `helm install` with the chart's
// defaults (image.repository, and the tag from appVersion) names it.
func (s Source) Ref() string { return s.Repository + ":" + s.Version }

// Dirty reports whether the work tree differs from the commit.
func (s Source) Dirty() bool { return len(s.Changes) > 0 }

// versionTag is what a version may be: an image tag (it is one), which
// also keeps it a plain file name (the tarball and the SBOMs carry it).
var versionTag = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$`)

// ReadSource reads the source at root: the commit, its time and whether
// the work tree is clean, the toolchain a build would use and the one
// go.mod names, and the chart's defaults. An empty version is the chart's
// appVersion, the tag its default values install; a version that is not
// an image tag is refused.
func ReadSource(ctx context.Context, root, version string) (Source, error) {
	chart, err := ReadChartDefaults(root)
	if err != nil {
		return Source{}, err
	}
	if version == "" {
		version = chart.AppVersion
	}
	if !versionTag.MatchString(version) {
		return Source{}, fmt.Errorf("the version %q is not an image tag ([A-Za-z0-9_][A-Za-z0-9_.-]*, at most 128 characters)", version)
	}
	src := Source{Root: root, Version: version, Repository: chart.Repository}
	head, err := git(root, "rev-parse", "HEAD")
	if err != nil {
		return Source{}, fmt.Errorf("the image is stamped with the commit it is built from: %w", err)
	}
	src.Revision = head
	// Untracked files count, each one (a stray .go file is compiled in).
	// Ignored ones (dist/, bin/) do not.
	status, err := git(root, "status", "--porcelain", "--untracked-files=all")
	if err != nil {
		return Source{}, err
	}
	if status != "" {
		src.Changes = strings.Split(status, "\n")
		src.Revision += "-dirty"
	}
	epoch := os.Getenv("SOURCE_DATE_EPOCH")
	if epoch == "" {
		if epoch, err = git(root, "log", "-1", "--format=%ct", "HEAD"); err != nil {
			return Source{}, err
		}
	}
	secs, err := strconv.ParseInt(epoch, 10, 64)
	if err != nil {
		return Source{}, fmt.Errorf("the commit time (or SOURCE_DATE_EPOCH) %q: %w", epoch, err)
	}
	src.Created = time.Unix(secs, 0).UTC()
	if src.GoVersion, err = goVersion(ctx, root); err != nil {
		return Source{}, err
	}
	if src.Toolchain, err = modToolchain(ctx, root); err != nil {
		return Source{}, err
	}
	return src, nil
}

// CheckPublishable refuses to publish (release or push) what src builds
// when no commit alone gives it: a work tree with changes, unless
// allowDirty; or a toolchain other than go.mod's, whose binaries (and so
// digest) differ from those of the toolchain the module pins.
func (s Source) CheckPublishable(allowDirty bool) error {
	if s.Dirty() && !allowDirty {
		shown := s.Changes
		if len(shown) > 5 {
			shown = append(shown[:5:5], "…")
		}
		return fmt.Errorf("the work tree has changes, so no commit gives what would be published (commit or remove them, or pass -allow-dirty, ALLOW_DIRTY=1 to make):\n  %s",
			strings.Join(shown, "\n  "))
	}
	if s.Toolchain == "" {
		return fmt.Errorf("go.mod has no toolchain line: a release is built with the toolchain go.mod pins")
	}
	if s.GoVersion != s.Toolchain {
		return fmt.Errorf("the build would use %s, go.mod's toolchain line says %s: build with %s (GOTOOLCHAIN=%s)",
			s.GoVersion, s.Toolchain, s.Toolchain, s.Toolchain)
	}
	return nil
}

func git(root string, args ...string) (string, error) {
	out, err := exec.Command("git", append([]string{"-C", root}, args...)...).Output()
	if err != nil {
		var stderr string
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = string(ee.Stderr)
		}
		return "", fmt.Errorf("git %s: %w %s", strings.Join(args, " "), err, stderr)
	}
	return strings.TrimSpace(string(out)), nil
}

// ChartPath is the Helm chart, relative to the repository's root.
const ChartPath = "charts/kargo-latch"

// ChartDefaults are the chart's say on the image: the repository and the
// tag (appVersion) it installs by default.
type ChartDefaults struct {
	Version    string
	AppVersion string
	Repository string
	Tag        string
}

// ReadChartDefaults reads Chart.yaml and values.yaml.
func ReadChartDefaults(root string) (ChartDefaults, error) {
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	var values struct {
		Image struct {
			Repository string `json:"repository"`
			Tag        string `json:"tag"`
		} `json:"image"`
	}
	for file, into := range map[string]any{"Chart.yaml": &chart, "values.yaml": &values} {
		b, err := os.ReadFile(filepath.Join(root, ChartPath, file))
		if err != nil {
			return ChartDefaults{}, err
		}
		if err := yaml.Unmarshal(b, into); err != nil {
			return ChartDefaults{}, fmt.Errorf("%s: %w", file, err)
		}
	}
	d := ChartDefaults{Version: chart.Version, AppVersion: chart.AppVersion, Repository: values.Image.Repository, Tag: values.Image.Tag}
	if d.AppVersion == "" || d.Repository == "" {
		return ChartDefaults{}, fmt.Errorf("%s: appVersion %q and image.repository %q must both be set", ChartPath, d.AppVersion, d.Repository)
	}
	return d, nil
}
