package e2enode

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kargo-latch/kargo-latch/hack/image/ociimage"
)

// brokenLimit bounds how long the suite's rollout check may take to say a
// broken Deployment is broken: the kubelet kills a container after three
// failed liveness probes, the chart's 10s apart.
const brokenLimit = 2 * time.Minute

// TestBrokenDeploymentsFailTheRollout: the check every test of the suite
// starts from (waitDeployment: the Deployment rolled out, its Pods Running
// and Ready) fails, and says why, for the chart's Deployment broken as a
// chart or an image can break it. Each is a copy of the release's
// Deployment with one thing wrong, inert otherwise (--dry-run, no leader
// election, watching an empty namespace), removed afterwards:
//   - the probes' port, the chart's `probes`, on a port the operator does
//     not listen on: the kubelet kills the container for failing its
//     liveness probe;
//   - the image's /kargo-latch not static (a PIE, which needs the dynamic
//     loader an image FROM scratch lacks): the container cannot start.
func TestBrokenDeploymentsFailTheRollout(t *testing.T) {
	empty := env.newProject(t)
	t.Run("wrong probe port", func(t *testing.T) {
		t.Parallel()
		err := env.brokenRollout(t, "broken-probe-port", empty, func(c *corev1.Container) {
			for i, p := range c.Ports {
				if p.Name == "probes" {
					c.Ports[i].ContainerPort = p.ContainerPort + 1
				}
			}
		})
		if err == nil || !strings.Contains(err.Error(), "failed liveness probe") {
			t.Errorf("the rollout check says %v, want the kubelet's restart for a failed liveness probe", err)
		}
	})
	t.Run("binary not static", func(t *testing.T) {
		t.Parallel()
		image := env.pushDynamicImage(t)
		err := env.brokenRollout(t, "broken-binary-not-static", empty, func(c *corev1.Container) { c.Image = image })
		if err == nil || !strings.Contains(err.Error(), "cannot run") || !strings.Contains(err.Error(), "no such file or directory") {
			t.Errorf("the rollout check says %v, want the container that cannot run: no such file or directory (its loader)", err)
		}
	})
}

// brokenRollout creates a one-replica copy of the release's Deployment,
// named name, inert but for its own Pods, with edit applied to its
// container, and returns what the suite's rollout check says of it.
func (w *world) brokenRollout(t *testing.T, name, emptyNamespace string, edit func(*corev1.Container)) error {
	t.Helper()
	ctx := context.Background()
	orig, err := w.kube.AppsV1().Deployments(releaseNS).Get(ctx, release, metav1.GetOptions{})
	must(t, err)
	podLabels := map[string]string{"kargo-latch.test/broken": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: releaseNS},
		Spec:       *orig.Spec.DeepCopy(),
	}
	one := int32(1)
	d.Spec.Replicas = &one
	d.Spec.Selector = &metav1.LabelSelector{MatchLabels: podLabels}
	d.Spec.Template.Labels = podLabels
	c := &d.Spec.Template.Spec.Containers[0]
	c.Args = slices.DeleteFunc(c.Args, func(a string) bool { return a == "--leader-elect" })
	c.Args = append(c.Args, "--dry-run", "--namespace="+emptyNamespace)
	edit(c)
	_, err = w.kube.AppsV1().Deployments(releaseNS).Create(ctx, d, metav1.CreateOptions{})
	must(t, err)
	podSelector := labels.Set(podLabels).String()
	t.Cleanup(func() {
		background := metav1.DeletePropagationBackground
		if err := w.kube.AppsV1().Deployments(releaseNS).Delete(ctx, name, metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
			t.Error(err)
		}
		waitFor(t, "the Pods of "+name+" to be gone", 2*time.Minute, func() (bool, error) {
			l, err := w.kube.CoreV1().Pods(releaseNS).List(ctx, metav1.ListOptions{LabelSelector: podSelector})
			return err == nil && len(l.Items) == 0, err
		})
	})
	start := time.Now()
	err = w.waitRollout(ctx, name, podSelector, brokenLimit)
	t.Logf("the rollout check of %s, after %.1fs: %v", name, time.Since(start).Seconds(), err)
	return err
}

// pushDynamicImage pushes the image under test, for this machine, with
// its /kargo-latch replaced by a program that is not static (a PIE built
// by the internal linker asks for /lib64/ld-linux-x86-64.so.2 or its
// like), and returns its reference.
func (w *world) pushDynamicImage(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kargo-latch")
	build := exec.Command("go", "build", "-trimpath", "-buildmode=pie", "-o", bin, "./test/cluster/pause")
	build.Dir = w.cluster.Root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building a program that is not static: %v\n%s", err, out)
	}
	f, err := elf.Open(bin)
	must(t, err)
	dynamic := slices.ContainsFunc(f.Progs, func(p *elf.Prog) bool { return p.Type == elf.PT_INTERP })
	_ = f.Close()
	if !dynamic {
		t.Fatalf("%s has no program interpreter: the premise (a binary that is not static) does not hold", bin)
	}
	content, err := os.ReadFile(bin)
	must(t, err)
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	must(t, tw.WriteHeader(&tar.Header{Name: "kargo-latch", Mode: 0o755, Size: int64(len(content)), Typeflag: tar.TypeReg}))
	_, err = tw.Write(content)
	must(t, err)
	must(t, tw.Close())
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layer.Bytes())), nil })
	must(t, err)
	idx, _, err := ociimage.ReadLayout(w.layout)
	must(t, err)
	img, err := ociimage.PlatformImage(idx, ociimage.HostPlatform())
	must(t, err)
	img, err = mutate.AppendLayers(img, l)
	must(t, err)
	ref := w.repository + ":" + w.tag + "-not-static"
	tag, err := name.NewTag(ref)
	must(t, err)
	must(t, remote.Write(tag, img))
	return ref
}
