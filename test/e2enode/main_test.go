// Package e2enode proves kargo-latch deployed as its users deploy it: the
// chart installed with helm, its Deployment's Pods running the image
// pulled from a registry, on a real node (kubelet, containerd, runc, the
// CNI bridge; test/cluster/node.go) of the test cluster. What the e2e
// suite shows with the image's binary run outside the cluster, these tests
// show of the Pods: in-cluster configuration, the securityContext, probes,
// the Lease identity, logs, restarts, a deleted leader, a rolling update,
// and a Prometheus that finds the Pods by Kubernetes service discovery.
//
// `make e2e-node` runs them (as root); `go test ./test/...` skips them
// unless KARGO_LATCH_E2E_NODE is set.
package e2enode

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kargo-latch/kargo-latch/hack/image/ociimage"
	"github.com/kargo-latch/kargo-latch/test/cluster"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// world is the cluster with its node, and the release the tests share.
type world struct {
	cluster *cluster.Cluster
	node    *cluster.Node
	kube    kubernetes.Interface
	dyn     dynamic.Interface
	kargo   *driver.Kargo
	// layout is the image under test; repository where it was pushed
	// (registry/name), tag its tag there.
	layout, repository, tag string
	// binarySHA is the sha256 of the image's /kargo-latch for this
	// machine.
	binarySHA string
	// kubeconfig is the admin's, for helm.
	kubeconfig, helmHome string
}

var env *world

// The release the tests share: helm-installed once, as the README says.
const (
	releaseNS = "kargo-latch"
	release   = "kargo-latch"
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	if os.Getenv("KARGO_LATCH_E2E_NODE") == "" {
		fmt.Println("e2enode: skipped: the node's tests run with `make e2e-node` (root, a kubelet, containerd)")
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	say := func(format string, args ...any) {
		fmt.Printf("node: %5.1fs "+format+"\n", append([]any{time.Since(start).Seconds()}, args...)...)
	}
	c, n, err := cluster.StartWithNode(ctx, cluster.Options{Log: say})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2enode:", err)
		return 1
	}
	w := &world{cluster: c, node: n}
	defer func() {
		say("stopping the node and the cluster")
		n.Stop()
		c.Stop()
		if w.helmHome != "" {
			_ = os.RemoveAll(w.helmHome)
		}
		say("stopped")
	}()
	if err := w.setUp(ctx, say); err != nil {
		fmt.Fprintln(os.Stderr, "e2enode:", err)
		fmt.Fprintf(os.Stderr, "e2enode: logs in %s and %s (KARGO_LATCH_KEEP_CLUSTER_DIR=1 keeps them)\n", c.Dir, n.Dir)
		return 1
	}
	env = w
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "e2enode: logs in %s and %s (KARGO_LATCH_KEEP_CLUSTER_DIR=1 keeps them)\n", c.Dir, n.Dir)
	}
	return code
}

// setUp pushes the image under test to the node's registry, as `make
// image-push` does, and installs the chart.
func (w *world) setUp(ctx context.Context, say func(string, ...any)) error {
	var err error
	if w.kube, err = kubernetes.NewForConfig(w.cluster.Config); err != nil {
		return err
	}
	if w.dyn, err = dynamic.NewForConfig(w.cluster.Config); err != nil {
		return err
	}
	w.kargo = driver.New(w.dyn)
	layout, cleanup, err := ociimage.LayoutForTests(ctx, w.cluster.Root)
	if err != nil {
		return err
	}
	_ = cleanup // the layout outlives the tests when it is `make image-for-tests`'s
	if w.binarySHA, err = ociimage.CheckLayoutIsTree(ctx, w.cluster.Root, layout); err != nil {
		return err
	}
	w.layout = layout
	if w.tag, err = layoutVersion(layout); err != nil {
		return err
	}
	w.repository = w.node.Registry + "/kargo-latch"
	digest, err := ociimage.Push(ctx, layout, w.repository+":"+w.tag, true)
	if err != nil {
		return fmt.Errorf("pushing the image: %w", err)
	}
	say("pushed %s:%s@%s", w.repository, w.tag, digest)
	dir, err := os.MkdirTemp("", "kargo-latch-e2enode-")
	if err != nil {
		return err
	}
	w.helmHome = dir
	w.kubeconfig = filepath.Join(dir, "kubeconfig")
	if err := cluster.WriteKubeconfig(w.kubeconfig, w.cluster.Config, ""); err != nil {
		return err
	}
	say("helm install %s (2 replicas, image %s:%s)", release, w.repository, w.tag)
	if out, err := w.helm(ctx, installArgs(w)...); err != nil {
		return fmt.Errorf("helm install: %w\n%s", err, out)
	}
	if err := w.waitDeployment(ctx, 3*time.Minute); err != nil {
		return err
	}
	say("both Pods Running and Ready")
	return nil
}

// installArgs are the README's `helm install`, with the image this test
// pushed and the settings the stories need: pause on failure, and logs at
// level 2.
func installArgs(w *world) []string {
	return []string{"install", release, filepath.Join(w.cluster.Root, "charts", "kargo-latch"),
		"--namespace", releaseNS, "--create-namespace",
		// The test cluster installs the StagePause CRD itself, and Helm
		// adopts no object it did not make.
		"--set", "crds.install=false",
		"--set", "image.repository=" + w.repository,
		"--set", "image.tag=" + w.tag,
		"--set", "controller.stageDefaults.pauseOnFailure=true",
		"--set", "controller.logLevel=2",
		"--wait=false",
	}
}
