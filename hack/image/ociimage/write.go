package ociimage

import (
	"archive/tar"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
)

// The names `make image` and `make release` write under dist/.
const (
	// LayoutDir is the OCI image layout.
	LayoutDir = "image"
	// tarballPrefix and tarballSuffix frame the image tarball's name
	// around the version: kargo-latch-image-dev.tar.
	tarballPrefix = "kargo-latch-image-"
	tarballSuffix = ".tar"
)

// TarballName is the image tarball's name for a version.
func TarballName(version string) string { return tarballPrefix + version + tarballSuffix }

// Annotations of the index's entry in index.json that name the image, as
// `docker save` writes them: containerd (kind, Docker's containerd store)
// names what it imports from an OCI layout by the first.
const (
	containerdImageName = "io.containerd.image.name"
	ociRefName          = "org.opencontainers.image.ref.name"
)

// legacyPlatform is the one platform of the tarball's manifest.json, read
// by Docker's classic image store, which holds one platform per tag: the
// common one of kind and CI machines. The other readers (containerd,
// Docker's containerd store) read the whole index.
var legacyPlatform = Platforms[0]

// Write writes img as an OCI image layout into layoutDir (replacing it) and
// as a tarball at tarPath, and returns the index's digest.
func Write(img *Image, layoutDir, tarPath string) (v1.Hash, error) {
	digest, err := img.Index.Digest()
	if err != nil {
		return v1.Hash{}, err
	}
	if err := os.RemoveAll(layoutDir); err != nil {
		return v1.Hash{}, err
	}
	lp, err := layout.Write(layoutDir, empty.Index)
	if err != nil {
		return v1.Hash{}, err
	}
	full, err := FullName(img.Source.Ref())
	if err != nil {
		return v1.Hash{}, err
	}
	if err := lp.AppendIndex(img.Index, layout.WithAnnotations(map[string]string{
		containerdImageName: full,
		ociRefName:          img.Source.Version,
	})); err != nil {
		return v1.Hash{}, err
	}
	if err := publicModes(layoutDir); err != nil {
		return v1.Hash{}, err
	}
	legacy, err := legacyManifest(img)
	if err != nil {
		return v1.Hash{}, err
	}
	return digest, writeTarball(layoutDir, tarPath, legacy, img.Source)
}

// publicModes makes the layout's files 0644 and its directories 0755, as
// in the tarball: the layout library writes some blobs 0600 and others
// with the executable bit.
func publicModes(dir string) (err error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := root.Close(); err == nil {
			err = cerr
		}
	}()
	return fs.WalkDir(root.FS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		mode := fs.FileMode(0o644)
		if d.IsDir() {
			mode = 0o755
		}
		return root.Chmod(path, mode)
	})
}

// FullName is ref as containerd and Docker name it: docker.io/library/x:tag
// for x:tag, so that a Pod's image kargo-latch:dev finds it.
func FullName(ref string) (string, error) {
	r, err := name.NewTag(ref)
	if err != nil {
		return "", err
	}
	registry := r.RegistryStr()
	if registry == name.DefaultRegistry {
		registry = "docker.io"
	}
	return registry + "/" + r.RepositoryStr() + ":" + r.TagStr(), nil
}

// legacyManifest is the manifest.json of `docker save`: the image of
// legacyPlatform, by the paths of its blobs in the layout.
func legacyManifest(img *Image) ([]byte, error) {
	pi, err := PlatformImage(img.Index, legacyPlatform)
	if err != nil {
		return nil, err
	}
	m, err := pi.Manifest()
	if err != nil {
		return nil, err
	}
	blob := func(h v1.Hash) string { return "blobs/" + h.Algorithm + "/" + h.Hex }
	entry := struct {
		Config   string
		RepoTags []string
		Layers   []string
	}{Config: blob(m.Config.Digest), RepoTags: []string{img.Source.Ref()}}
	for _, l := range m.Layers {
		entry.Layers = append(entry.Layers, blob(l.Digest))
	}
	return json.Marshal([]any{entry})
}

// writeTarball archives the layout plus manifest.json, in name order, with
// the commit's time and root's ownership on every entry.
func writeTarball(layoutDir, tarPath string, manifest []byte, src Source) (err error) {
	layout, err := os.OpenRoot(layoutDir)
	if err != nil {
		return err
	}
	defer func() { _ = layout.Close() }()
	if err := os.MkdirAll(filepath.Dir(tarPath), 0o755); err != nil { //nolint:gosec // dist/ holds what is published
		return err
	}
	f, err := os.Create(tarPath)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}()
	tw := tar.NewWriter(f)
	add := func(name string, mode int64, body []byte, dir bool) error {
		hdr := &tar.Header{Name: name, Mode: mode, Size: int64(len(body)), ModTime: src.Created,
			Typeflag: tar.TypeReg, Uname: "root", Gname: "root", Format: tar.FormatUSTAR}
		if dir {
			hdr.Typeflag = tar.TypeDir
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	// WalkDir visits in lexical order; manifest.json goes after
	// index.json, where it sorts.
	err = fs.WalkDir(layout.FS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == "." {
			return err
		}
		if d.IsDir() {
			return add(path+"/", 0o755, nil, true)
		}
		if path == "oci-layout" {
			if err := add("manifest.json", 0o644, manifest, false); err != nil {
				return err
			}
		}
		body, err := fs.ReadFile(layout.FS(), path)
		if err != nil {
			return err
		}
		return add(path, 0o644, body, false)
	})
	if err != nil {
		return fmt.Errorf("writing %s: %w", tarPath, err)
	}
	return tw.Close()
}
