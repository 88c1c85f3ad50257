package ociimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Platforms are the image's platforms, in the index's order.
var Platforms = []v1.Platform{
	{OS: "linux", Architecture: "amd64"},
	{OS: "linux", Architecture: "arm64"},
}

const (
	// Entrypoint is the binary's path in the image.
	Entrypoint = "/kargo-latch"
	// NonrootID is the user and group the operator runs as, and that owns
	// its binary: distroless's nonroot, which Kubernetes' runAsNonRoot
	// accepts without a runAsUser because it is numeric.
	NonrootID = 65532
	// SourceURL is the repository, for the source label.
	SourceURL = "https://github.com/kargo-latch/kargo-latch"
	// License is the licenses label and the SBOM's license of
	// kargo-latch: the repository holds no license file yet, and SPDX's
	// NOASSERTION says so rather than guess.
	License = "NOASSERTION"
)

// User is the config's user, numeric so that runAsNonRoot can check it.
var User = fmt.Sprintf("%d:%d", NonrootID, NonrootID)

// The user and group databases: only nonroot. The operator reads neither;
// they are there so that tools (and people) looking at a process or a file
// of the image see a name.
var (
	passwd = fmt.Sprintf("nonroot:x:%d:%d:nonroot:/nonexistent:/sbin/nologin\n", NonrootID, NonrootID)
	group  = fmt.Sprintf("nonroot:x:%d:\n", NonrootID)
)

// The labels of the image's version (its tag) and revision (the commit,
// with -dirty when the work tree differed from it).
const (
	VersionLabel  = "org.opencontainers.image.version"
	RevisionLabel = "org.opencontainers.image.revision"
)

// GoVersionLabel is the label that names the Go toolchain that built the
// binary, which the binary's build information records too.
const GoVersionLabel = "io.github.kargo-latch.go-version"

// Labels are the image's OCI labels, also the index's annotations.
func Labels(src Source) map[string]string {
	return map[string]string{
		GoVersionLabel:                      src.GoVersion,
		"org.opencontainers.image.source":   SourceURL,
		VersionLabel:                        src.Version,
		RevisionLabel:                       src.Revision,
		"org.opencontainers.image.created":  src.Created.Format(time.RFC3339),
		"org.opencontainers.image.licenses": License,
	}
}

// Image is a built image index and the binaries it holds.
type Image struct {
	Source Source
	Index  v1.ImageIndex
	// Binaries are the built binaries by platform ("linux/amd64").
	Binaries map[string]string
}

// Build cross-compiles the operator for every platform into workDir and
// assembles the image index.
func Build(ctx context.Context, src Source, workDir string) (*Image, error) {
	out := &Image{Source: src, Index: mutate.IndexMediaType(empty.Index, types.OCIImageIndex), Binaries: map[string]string{}}
	var adds []mutate.IndexAddendum
	for _, p := range Platforms {
		bin := filepath.Join(workDir, p.OS+"-"+p.Architecture, "kargo-latch")
		if err := BuildBinary(ctx, src, p, bin); err != nil {
			return nil, err
		}
		out.Binaries[p.String()] = bin
		img, err := platformImage(src, p, bin)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, err)
		}
		adds = append(adds, mutate.IndexAddendum{Add: img, Descriptor: v1.Descriptor{Platform: &p}})
	}
	out.Index = mutate.AppendManifests(out.Index, adds...)
	idx, ok := mutate.Annotations(out.Index, Labels(src)).(v1.ImageIndex)
	if !ok {
		return nil, fmt.Errorf("annotating the index")
	}
	out.Index = idx
	return out, nil
}

// BuildBinary cross-compiles ./cmd/kargo-latch for p into out: static
// (CGO_ENABLED=0), without the build's paths (-trimpath) or VCS stamp (the
// labels carry the revision), without symbols (-s -w), and with every Go
// setting that changes the output fixed (see buildEnv).
func BuildBinary(ctx context.Context, src Source, p v1.Platform, out string) error {
	env, err := buildEnv(ctx, src.Root, p)
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false",
		"-ldflags", "-s -w -X main.version="+src.Version, "-o", out, "./cmd/kargo-latch")
	cmd.Dir, cmd.Env = src.Root, env
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build for %s: %w\n%s", p, err, b)
	}
	return nil
}

// platformImage is the image for p: FROM scratch, one layer.
func platformImage(src Source, p v1.Platform, binary string) (v1.Image, error) {
	layerTar, err := rootFS(src, binary)
	if err != nil {
		return nil, err
	}
	compressed, err := gzipped(layerTar)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(compressed)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, err
	}
	created := v1.Time{Time: src.Created}
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, MediaType: types.OCILayer, History: v1.History{
		Created:   created,
		CreatedBy: "hack/image: kargo-latch " + src.Version + " (go build -trimpath, CGO_ENABLED=0)",
	}})
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture, cfg.Variant = p.OS, p.Architecture, p.Variant
	cfg.Created = created
	cfg.Config = v1.Config{
		User:       User,
		Entrypoint: []string{Entrypoint},
		Labels:     Labels(src),
	}
	return mutate.ConfigFile(img, cfg)
}

// rootFS is the layer: /etc/passwd and /etc/group, root's, and the binary,
// nonroot's, all dated from the commit, in this order.
func rootFS(src Source, binary string) ([]byte, error) {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	entries := []struct {
		hdr  tar.Header
		body []byte
	}{
		{tar.Header{Typeflag: tar.TypeDir, Name: "etc/", Mode: 0o755}, nil},
		{tar.Header{Typeflag: tar.TypeReg, Name: "etc/group", Mode: 0o644}, []byte(group)},
		{tar.Header{Typeflag: tar.TypeReg, Name: "etc/passwd", Mode: 0o644}, []byte(passwd)},
		// Root's, as distroless images have it: the nonroot user that runs
		// it may execute the binary, never replace it.
		{tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(Entrypoint, "/"), Mode: 0o755,
			Uname: "root", Gname: "root"}, bin},
	}
	for _, e := range entries {
		hdr := e.hdr
		hdr.Size = int64(len(e.body))
		hdr.ModTime = src.Created
		if hdr.Uname == "" {
			hdr.Uname, hdr.Gname = "root", "root"
		}
		// USTAR: no PAX records with access or change times.
		hdr.Format = tar.FormatUSTAR
		if err := tw.WriteHeader(&hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(e.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// gzipped compresses b with a header that holds no name and no time.
func gzipped(b []byte) ([]byte, error) {
	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := zw.Write(b); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}
