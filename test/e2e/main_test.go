// Package e2e proves kargo-latch on a real kube-apiserver with Kargo's real
// CRDs, token authentication and RBAC: the driver plays Kargo, people act
// with their own tokens, and an operator running as its own ServiceAccount
// (bound to the shipped RBAC) reacts.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kargo-latch/kargo-latch/kargo"
	"github.com/kargo-latch/kargo-latch/test/cluster"
	"github.com/kargo-latch/kargo-latch/test/driver"
)

// The people and controllers of the tests, as static token users of a
// throwaway loopback cluster.
//
//nolint:gosec // test tokens
const (
	devToken      = "dev-token"       // bound to kargo-latch-pauser; may create Promotions
	leadToken     = "lead-token"      // bound to kargo-latch-resumer; may update ProjectConfigs
	resumerToken  = "resumer-token"   // bound to kargo-latch-resumer only
	kargoCtlToken = "kargo-ctl-token" // Kargo's controller ServiceAccount, as the gate knows it
)

var env struct {
	cluster *cluster.Cluster
	dyn     dynamic.Interface
	kube    kubernetes.Interface
	kargo   *driver.Kargo
	// As each actor.
	dev, lead, resumer, kargoCtl dynamic.Interface
	// operator is a rest config for the operator's own ServiceAccount.
	operator *rest.Config
}

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	ctx := context.Background()
	// No skipping: without the test cluster these tests must fail, so that
	// CI can never pass without proving the operator on a real apiserver.
	c, err := cluster.Start(ctx, cluster.Options{Tokens: []string{
		devToken + ",dev,dev,",
		leadToken + ",lead,lead,",
		resumerToken + ",resumer,resumer,",
		kargoCtlToken + ",system:serviceaccount:kargo:kargo-controller,kargo-controller,\"system:serviceaccounts,system:serviceaccounts:kargo\"",
	}})
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
	env.dev = dynamic.NewForConfigOrDie(c.UserConfig(devToken))
	env.lead = dynamic.NewForConfigOrDie(c.UserConfig(leadToken))
	env.resumer = dynamic.NewForConfigOrDie(c.UserConfig(resumerToken))
	env.kargoCtl = dynamic.NewForConfigOrDie(c.UserConfig(kargoCtlToken))
	if err := installShipped(ctx, c); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: installing the shipped manifests:", err)
		return 1
	}
	if env.operator, err = c.ServiceAccountConfig(ctx, "kargo-latch", "kargo-latch"); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: operator token:", err)
		return 1
	}
	return m.Run()
}

var kargoGroup = kargo.GroupVersion.Group

// installShipped applies the shipped base (the operator's ServiceAccount and
// RBAC, the people's roles) and the pause gate, plus the test actors' own
// rights.
func installShipped(ctx context.Context, c *cluster.Cluster) error {
	objs, err := cluster.Kustomize(filepath.Join(c.Root, "manifests", "default"))
	if err != nil {
		return err
	}
	objs = append(objs,
		cluster.NewClusterRole("e2e-promoter", cluster.Rule(kargoGroup, "promotions", "create", "get", "list"), cluster.Rule(kargoGroup, "stages", "get", "list", "watch")),
		cluster.NewClusterRole("e2e-projectconfig-editor", cluster.Rule(kargoGroup, "projectconfigs", "get", "update")),
		cluster.NewClusterRole("e2e-kargo-controller", cluster.Rule(kargoGroup, "promotions", "create", "get", "list")),
		cluster.BindUser("e2e-dev-pauser", "kargo-latch-pauser", "dev"),
		cluster.BindUser("e2e-dev-promoter", "e2e-promoter", "dev"),
		cluster.BindUser("e2e-lead-resumer", "kargo-latch-resumer", "lead"),
		cluster.BindUser("e2e-lead-projectconfigs", "e2e-projectconfig-editor", "lead"),
		cluster.BindUser("e2e-resumer", "kargo-latch-resumer", "resumer"),
		cluster.BindUser("e2e-kargo-controller", "e2e-kargo-controller", "system:serviceaccount:kargo:kargo-controller"),
	)
	return cluster.Apply(ctx, c.Config, objs...)
}
