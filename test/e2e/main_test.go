// Package e2e proves kargo-latch on a real kube-apiserver with Kargo's real
// CRDs: the driver plays Kargo, an in-process operator reacts, and the
// tests read what lands on the server.
package e2e

import (
	"context"
	"fmt"
	"os"
	"testing"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kargo-latch/kargo-latch/test/cluster"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

var env struct {
	cluster *cluster.Cluster
	dyn     dynamic.Interface
	kube    kubernetes.Interface
	kargo   *driver.Kargo
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// No skipping: without the test cluster these tests must fail, so that
	// CI can never pass without proving the operator on a real apiserver.
	c, err := cluster.Start(context.Background(), cluster.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: cannot start the test cluster:", err)
		return 1
	}
	defer c.Stop()
	fmt.Fprintln(os.Stderr, "e2e: using", c.CRDSource)
	env.cluster = c
	env.dyn = dynamic.NewForConfigOrDie(c.Config)
	env.kube = kubernetes.NewForConfigOrDie(c.Config)
	env.kargo = driver.New(env.dyn)
	return m.Run()
}
