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
// platforms come in a fixed order. Two builds of one commit with one Go
// toolchain give one digest.
package ociimage

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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
	// Created is the commit's time, or SOURCE_DATE_EPOCH when set: the
	// config's created time, the created label and every file's time.
	Created time.Time
	// Repository is the image's name without a tag: the chart's default
	// image.repository.
	Repository string
}

// Ref is the image's name and tag, as `helm install` with the chart's
// defaults (image.repository, and the tag from appVersion) names it.
func (s Source) Ref() string { return s.Repository + ":" + s.Version }

// ReadSource reads the source at root: the commit, its time and whether
// the work tree is clean, and the chart's defaults. An empty version is
// the chart's appVersion, the tag its default values install.
func ReadSource(root, version string) (Source, error) {
	chart, err := ReadChartDefaults(root)
	if err != nil {
		return Source{}, err
	}
	if version == "" {
		version = chart.AppVersion
	}
	src := Source{Root: root, Version: version, Repository: chart.Repository}
	head, err := git(root, "rev-parse", "HEAD")
	if err != nil {
		return Source{}, fmt.Errorf("the image is stamped with the commit it is built from: %w", err)
	}
	src.Revision = head
	// Untracked files count: a stray .go file is compiled in. Ignored
	// ones (dist/, bin/) do not.
	status, err := git(root, "status", "--porcelain")
	if err != nil {
		return Source{}, err
	}
	if status != "" {
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
	return src, nil
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
