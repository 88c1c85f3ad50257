// Command image builds kargo-latch's container image with Go alone (see
// package ociimage), pushes it, and writes a release:
//
//	go run ./hack/image build   [-version V]              # make image: dist/image and dist/kargo-latch-image-V.tar
//	go run ./hack/image push    -image REGISTRY/NAME:TAG  # make image-push: builds as version TAG, pushes
//	go run ./hack/image push    -image REGISTRY/NAME:TAG -layout DIR  # pushes the layout DIR as it is
//	go run ./hack/image release -version vX.Y.Z           # make release: dist/release-vX.Y.Z/, the whole bundle
//
// The version defaults to the chart's appVersion, the tag the chart's
// defaults install. A release, and a push of what it builds, are refused
// from a work tree with changes unless -allow-dirty, and with a toolchain
// other than go.mod's.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/google/go-containerregistry/pkg/name"

	"github.com/kargo-latch/kargo-latch/hack/image/ociimage"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "hack/image:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: go run ./hack/image build|push|release [flags]")
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	version := fs.String("version", "", "the image's tag and version (default: the chart's appVersion)")
	out := fs.String("out", "", "the output directory (default: build and push ROOT/dist, release ROOT/dist/release-VERSION)")
	root := fs.String("root", ".", "the repository's root")
	ref := fs.String("image", "", "push: where to push, registry/name:tag; the tag is the version built")
	layoutDir := fs.String("layout", "", "push: push this image layout as it is (a release's image/) instead of building")
	helm := fs.String("helm", "bin/helm", "release: the helm binary that packages the chart")
	allowDirty := fs.Bool("allow-dirty", false, "release, push: publish from a work tree with changes (no commit gives the result)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	absRoot, err := filepath.Abs(*root)
	if err != nil {
		return err
	}
	if *out == "" {
		*out = filepath.Join(absRoot, "dist")
	}
	switch args[0] {
	case "build":
		src, err := ociimage.ReadSource(ctx, absRoot, *version)
		if err != nil {
			return err
		}
		return build(ctx, src, *out)
	case "push":
		tag, err := name.NewTag(*ref, name.StrictValidation)
		if err != nil {
			return fmt.Errorf("-image %q: want registry/name:tag: %w", *ref, err)
		}
		if *layoutDir == "" {
			src, err := ociimage.ReadSource(ctx, absRoot, tag.TagStr())
			if err != nil {
				return err
			}
			if err := src.CheckPublishable(*allowDirty); err != nil {
				return fmt.Errorf("push: %w", err)
			}
			if err := build(ctx, src, *out); err != nil {
				return err
			}
			*layoutDir = filepath.Join(*out, ociimage.LayoutDir)
		}
		digest, err := ociimage.Push(ctx, *layoutDir, *ref, *allowDirty)
		if err != nil {
			return err
		}
		fmt.Printf("pushed %s@%s\n", *ref, digest)
		return nil
	case "release":
		if *version == "" {
			return fmt.Errorf("release: -version vX.Y.Z is required")
		}
		if !isSet(fs, "out") {
			*out = ociimage.ReleaseDir(absRoot, *version)
		}
		src, err := ociimage.ReadSource(ctx, absRoot, *version)
		if err != nil {
			return err
		}
		if err := src.CheckPublishable(*allowDirty); err != nil {
			return fmt.Errorf("release: %w", err)
		}
		warnDirty(src)
		digest, err := ociimage.Release(ctx, src, *out, *helm)
		if err != nil {
			return err
		}
		fmt.Printf("release %s of %s in %s: image %s@%s, chart %s, checksums in %s\n", src.Version, src.Revision,
			*out, src.Ref(), digest, ociimage.ChartName(src.Version), ociimage.ChecksumsName)
		return nil
	default:
		return fmt.Errorf("unknown command %q: want build, push or release", args[0])
	}
}

func isSet(fs *flag.FlagSet, name string) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}

func build(ctx context.Context, src ociimage.Source, out string) error {
	warnDirty(src)
	work, err := os.MkdirTemp("", "kargo-latch-image-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(work) }()
	img, err := ociimage.Build(ctx, src, work)
	if err != nil {
		return err
	}
	layoutDir, tarPath := filepath.Join(out, ociimage.LayoutDir), filepath.Join(out, ociimage.TarballName(src.Version))
	digest, err := ociimage.Write(img, layoutDir, tarPath)
	if err != nil {
		return err
	}
	fmt.Printf("image %s@%s (revision %s, created %s)\n", src.Ref(), digest, src.Revision, src.Created.Format("2006-01-02T15:04:05Z"))
	for _, p := range ociimage.Platforms {
		pi, err := ociimage.PlatformImage(img.Index, p)
		if err != nil {
			return err
		}
		d, err := pi.Digest()
		if err != nil {
			return err
		}
		size, err := ociimage.CompressedSize(pi)
		if err != nil {
			return err
		}
		fmt.Printf("  %-12s %s  %.1f MiB compressed\n", p, d, float64(size)/(1<<20))
	}
	fmt.Printf("  layout  %s\n  tarball %s\n", layoutDir, tarPath)
	return nil
}

func warnDirty(src ociimage.Source) {
	if src.Dirty() {
		fmt.Fprintf(os.Stderr, "hack/image: the work tree has changes: the image is labelled revision %s, and no commit alone gives it\n", src.Revision)
	}
}
