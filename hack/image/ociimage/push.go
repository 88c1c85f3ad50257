package ociimage

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Push pushes the image index of the layout at layoutDir, unchanged, to
// ref (which names a tag), with the credentials of the docker config
// ($DOCKER_CONFIG, else ~/.docker/config.json, and its credential
// helpers). The tag must be the image's version: the chart installs
// image.tag and expects the binary that says it is that version. An image
// built from a work tree with changes (its revision label ends in -dirty)
// is refused unless allowDirty: no commit gives it.
func Push(ctx context.Context, layoutDir, ref string, allowDirty bool) (v1.Hash, error) {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("%q: want registry/name:tag: %w", ref, err)
	}
	idx, _, err := ReadLayout(layoutDir)
	if err != nil {
		return v1.Hash{}, err
	}
	m, err := idx.IndexManifest()
	if err != nil {
		return v1.Hash{}, err
	}
	if v := m.Annotations[VersionLabel]; v != tag.TagStr() {
		return v1.Hash{}, fmt.Errorf("the image in %s is version %q; build it as %q (VERSION=%s) to push it as %s", layoutDir, v, tag.TagStr(), tag.TagStr(), ref)
	}
	if rev := m.Annotations[RevisionLabel]; strings.HasSuffix(rev, "-dirty") && !allowDirty {
		return v1.Hash{}, fmt.Errorf("the image in %s was built from a work tree with changes (revision %s), which no commit gives; pass -allow-dirty (ALLOW_DIRTY=1) to push it anyway", layoutDir, rev)
	}
	if err := remote.WriteIndex(tag, idx, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return v1.Hash{}, err
	}
	return idx.Digest()
}
