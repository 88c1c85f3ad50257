package e2e

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kargo-latch/kargo-latch/hack/image/ociimage"
)

// The operators the Helm tests install run from the image's own binary,
// not from `go build`: the image `make image` wrote (the layout
// $KARGO_LATCH_IMAGE names), or one built at first use, whose binary for
// this machine's platform is extracted and run as a container of the
// chart's Deployment runs it (no kubelet runs Pods here).

var imageOperator struct {
	once sync.Once
	// name is the image's name, as containerd and Docker know it.
	name    string
	path    string
	err     error
	cleanup []func()
}

// imageOperatorPath extracts the image's binary, once per test run.
func imageOperatorPath() (string, error) {
	op := &imageOperator
	op.once.Do(func() {
		layout, cleanup, err := ociimage.LayoutForTests(context.Background(), env.cluster.Root)
		if err != nil {
			op.err = err
			return
		}
		op.cleanup = append(op.cleanup, cleanup)
		_, entry, err := ociimage.ReadLayout(layout)
		if err != nil {
			op.err = err
			return
		}
		op.name = entry.Annotations["io.containerd.image.name"]
		dir, err := os.MkdirTemp("", "kargo-latch-image-bin-")
		if err != nil {
			op.err = err
			return
		}
		op.cleanup = append(op.cleanup, func() { _ = os.RemoveAll(dir) })
		op.path, op.err = ociimage.ExtractBinary(layout, dir)
	})
	return imageOperator.path, imageOperator.err
}

// removeImageOperator removes what imageOperatorPath made.
func removeImageOperator() {
	for _, f := range imageOperator.cleanup {
		f()
	}
}

// runFromImage makes p run as the container c of a Deployment the chart
// rendered: the binary of the image c names, as its entrypoint (c has no
// command of its own), with p's args (the test passes c's) and c's
// environment.
func runFromImage(t *testing.T, p *process, c corev1.Container) {
	t.Helper()
	_, err := imageOperatorPath()
	must(t, err)
	want, err := ociimage.FullName(c.Image)
	must(t, err)
	if want != imageOperator.name {
		t.Fatalf("the Deployment's container runs the image %s; the image under test is %s", c.Image, imageOperator.name)
	}
	if len(c.Command) > 0 {
		t.Fatalf("the Deployment's container overrides the image's entrypoint with %v", c.Command)
	}
	p.env = []string{}
	for _, e := range c.Env {
		if e.ValueFrom != nil {
			t.Fatalf("the container's variable %s has a valueFrom, which this test cannot resolve", e.Name)
		}
		p.env = append(p.env, fmt.Sprintf("%s=%s", e.Name, e.Value))
	}
	p.binary = imageOperatorPath
}
