// Command image builds kargo-latch's container image with Go alone (see
// package ociimage), pushes it, and writes a release:
//
//	go run ./hack/image build   [-version V]          # make image: dist/image and dist/kargo-latch-image-V.tar
//	go run ./hack/image push    -image REGISTRY/NAME:TAG  # make image-push: builds as version TAG, pushes
//	go run ./hack/image release -version vX.Y.Z       # make release: dist/ emptied, then the whole bundle
//
// The version defaults to the chart's appVersion, the tag the chart's
// defaults install.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
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
	out := fs.String("out", "dist", "the output directory")
	root := fs.String("root", ".", "the repository's root")
	ref := fs.String("image", "", "push: where to push, registry/name:tag; the tag is the version built")
	helm := fs.String("helm", "bin/helm", "release: the helm binary that packages the chart")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	absRoot, err := filepath.Abs(*root)
	if err != nil {
		return err
	}
	switch args[0] {
	case "build":
		return build(ctx, absRoot, *version, *out)
	case "push":
		tag, err := name.NewTag(*ref, name.StrictValidation)
		if err != nil {
			return fmt.Errorf("-image %q: want registry/name:tag: %w", *ref, err)
		}
		if err := build(ctx, absRoot, tag.TagStr(), *out); err != nil {
			return err
		}
		digest, err := ociimage.Push(ctx, filepath.Join(*out, ociimage.LayoutDir), *ref)
		if err != nil {
			return err
		}
		fmt.Printf("pushed %s@%s\n", *ref, digest)
		return nil
	case "release":
		src, err := ociimage.ReadSource(absRoot, *version)
		if err != nil {
			return err
		}
		if *version == "" {
			return fmt.Errorf("release: -version vX.Y.Z is required")
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

func build(ctx context.Context, root, version, out string) error {
	src, err := ociimage.ReadSource(root, version)
	if err != nil {
		return err
	}
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
	if strings.HasSuffix(src.Revision, "-dirty") {
		fmt.Fprintf(os.Stderr, "hack/image: the work tree has changes: the image is labelled revision %s, and no commit alone gives it\n", src.Revision)
	}
}
