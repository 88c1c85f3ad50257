// Package e2e proves kargo-latch on a real kube-apiserver with Kargo's real
// CRDs, token authentication and RBAC: the driver plays Kargo, people act
// with their own tokens, and an operator running as its own ServiceAccount
// (bound to the shipped RBAC) reacts.
package e2e

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
	kargoAPIToken = "kargo-api-token" // Kargo's API server ServiceAccount (UI, API, CLI), as gate-people knows it
	// A sharded Kargo controller, which reaches the control plane with the
	// kubeconfig it is given: its user, kargoShardUser, is not a
	// ServiceAccount, and not in the shipped gate's setting.
	kargoShardToken = "kargo-shard-token"
	// Bound to nothing cluster-wide: a test binds it per project, as
	// people are (kargo-latch-pauser and kargo-latch-viewer in one
	// namespace), to see the dashboard with a project's rights only.
	oncallToken = "oncall-token"
)

// kargoShardUser is the sharded Kargo controller's username.
const kargoShardUser = "kargo-shard-eu"

// kargoAPIUser is Kargo's API server as the chart installs it: the
// ServiceAccount kargo-api in Kargo's namespace.
const kargoAPIUser = "system:serviceaccount:kargo:kargo-api"

// world is one test cluster with the people and programs that act on it.
type world struct {
	cluster *cluster.Cluster
	dyn     dynamic.Interface
	kube    kubernetes.Interface
	kargo   *driver.Kargo
	// As each actor.
	dev, lead, resumer, kargoCtl, kargoShard dynamic.Interface
	// operator is a rest config for the operator's own ServiceAccount.
	operator *rest.Config
	// marker is the operator as installed with the opt-in mark-verified
	// component: another ServiceAccount (markerServiceAccount), so that one
	// cluster holds an operator with the right to mark Freight verified and
	// the default one without it.
	marker *rest.Config
	// verifier is the operator as installed with the opt-in verify-on-latch
	// and mark-verified components (verifierServiceAccount).
	verifier *rest.Config
}

// env is the cluster most tests share.
var env *world

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	// No skipping: without the test cluster these tests must fail, so that
	// CI can never pass without proving the operator on a real apiserver.
	// kube-controller-manager runs too, so that ownerReferences and
	// namespace deletion behave as in a real cluster.
	w, err := newWorld(context.Background(), cluster.Options{ControllerManager: true}, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	defer w.cluster.Stop()
	defer stopRollouts()
	defer removeImageOperator()
	defer stopBrowser()
	fmt.Fprintln(os.Stderr, "e2e: using", w.cluster.CRDSource)
	env = w
	return m.Run()
}

// newWorld starts a cluster with the tests' people as token users and the
// shipped manifests installed. wrap, when not nil, wraps the transport of
// the people's and Kargo's clients (never the operator's).
func newWorld(ctx context.Context, opts cluster.Options, wrap func(http.RoundTripper) http.RoundTripper) (_ *world, err error) {
	opts.Tokens = append(opts.Tokens,
		devToken+",dev,dev,",
		leadToken+",lead,lead,",
		resumerToken+",resumer,resumer,",
		kargoCtlToken+",system:serviceaccount:kargo:kargo-controller,kargo-controller,\"system:serviceaccounts,system:serviceaccounts:kargo\"",
		kargoAPIToken+","+kargoAPIUser+",kargo-api,\"system:serviceaccounts,system:serviceaccounts:kargo\"",
		kargoShardToken+","+kargoShardUser+","+kargoShardUser+",",
		oncallToken+",oncall,oncall,",
	)
	c, err := cluster.Start(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("cannot start the test cluster: %w", err)
	}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	as := func(cfg *rest.Config) *rest.Config {
		cfg = rest.CopyConfig(cfg)
		cfg.WrapTransport = wrap
		return cfg
	}
	w := &world{
		cluster:    c,
		dyn:        dynamic.NewForConfigOrDie(as(c.Config)),
		kube:       kubernetes.NewForConfigOrDie(as(c.Config)),
		dev:        dynamic.NewForConfigOrDie(as(c.UserConfig(devToken))),
		lead:       dynamic.NewForConfigOrDie(as(c.UserConfig(leadToken))),
		resumer:    dynamic.NewForConfigOrDie(as(c.UserConfig(resumerToken))),
		kargoCtl:   dynamic.NewForConfigOrDie(as(c.UserConfig(kargoCtlToken))),
		kargoShard: dynamic.NewForConfigOrDie(as(c.UserConfig(kargoShardToken))),
	}
	w.kargo = driver.New(w.dyn)
	if err := installShipped(ctx, c); err != nil {
		return nil, fmt.Errorf("installing the shipped manifests: %w", err)
	}
	// Argo Rollouts' CRDs, which an operator with verify-on-latch watches;
	// the analysis controller starts with the first test that needs it.
	if err := c.InstallRolloutsCRDs(ctx); err != nil {
		return nil, err
	}
	if w.operator, err = c.ServiceAccountConfig(ctx, "kargo-latch", "kargo-latch"); err != nil {
		return nil, fmt.Errorf("operator token: %w", err)
	}
	if w.marker, err = c.ServiceAccountConfig(ctx, "kargo-latch", markerServiceAccount); err != nil {
		return nil, fmt.Errorf("marking operator token: %w", err)
	}
	if w.verifier, err = c.ServiceAccountConfig(ctx, "kargo-latch", verifierServiceAccount); err != nil {
		return nil, fmt.Errorf("verifying operator token: %w", err)
	}
	return w, nil
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
		cluster.NewClusterRole("e2e-promoter", cluster.Rule(kargoGroup, "promotions", "create", "get", "list"),
			cluster.Rule(kargoGroup, "promotionrequests", "create", "get", "list"), cluster.Rule(kargoGroup, "stages", "get", "list", "watch")),
		cluster.NewClusterRole("e2e-projectconfig-editor", cluster.Rule(kargoGroup, "projectconfigs", "get", "update")),
		// Kargo's controllers create Promotions, and PromotionRequests for
		// target-aware Stages (Kargo main).
		cluster.NewClusterRole("e2e-kargo-controller",
			cluster.Rule(kargoGroup, "promotions", "create", "get", "list"), cluster.Rule(kargoGroup, "promotionrequests", "create", "get", "list")),
		cluster.BindUser("e2e-dev-pauser", "kargo-latch-pauser", "dev"),
		cluster.BindUser("e2e-dev-promoter", "e2e-promoter", "dev"),
		cluster.BindUser("e2e-lead-resumer", "kargo-latch-resumer", "lead"),
		cluster.BindUser("e2e-lead-projectconfigs", "e2e-projectconfig-editor", "lead"),
		cluster.BindUser("e2e-resumer", "kargo-latch-resumer", "resumer"),
		cluster.BindUser("e2e-kargo-controller", "e2e-kargo-controller", "system:serviceaccount:kargo:kargo-controller"),
		cluster.BindUser("e2e-kargo-shard", "e2e-kargo-controller", kargoShardUser),
		// Kargo's API server may create Promotions and, through the
		// kargo-project-admin role Kargo binds it to, update ProjectConfigs.
		cluster.BindUser("e2e-kargo-api-promoter", "e2e-promoter", kargoAPIUser),
		cluster.BindUser("e2e-kargo-api-projectconfigs", "e2e-projectconfig-editor", kargoAPIUser),
	)
	marker, err := componentIdentity(c, markerServiceAccount, "marker", "mark-verified")
	if err != nil {
		return err
	}
	verifier, err := componentIdentity(c, verifierServiceAccount, "verifier", "mark-verified", "verify-on-latch")
	if err != nil {
		return err
	}
	objs = append(append(objs, marker...), verifier...)
	return cluster.Apply(ctx, c.Config, objs...)
}

// markerServiceAccount is the operator's identity in an install with the
// opt-in mark-verified component, and verifierServiceAccount in one with the
// verify-on-latch component too.
const (
	markerServiceAccount   = "kargo-latch-marker"
	verifierServiceAccount = "kargo-latch-verifier"
)

// componentIdentity is another operator identity: the shipped operator
// ClusterRole plus shipped opt-in components, whose bindings and admission
// guards are pointed at the ServiceAccount sa instead of
// kargo-latch/kargo-latch (their names suffixed). The default identity thus
// keeps the default install's rights, and tests of several installs share
// one cluster.
func componentIdentity(c *cluster.Cluster, sa, suffix string, components ...string) ([]*unstructured.Unstructured, error) {
	dir, err := os.MkdirTemp("", "kargo-latch-"+suffix+"-")
	if err != nil {
		return nil, err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	overlay := "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\ncomponents:\n"
	for _, name := range components {
		// kustomize takes a component only by a relative path.
		component, err := filepath.Rel(dir, filepath.Join(c.Root, "manifests", "components", name))
		if err != nil {
			return nil, err
		}
		overlay += "- " + component + "\n"
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(overlay), 0o600); err != nil {
		return nil, err
	}
	objs, err := cluster.Kustomize(dir)
	if err != nil {
		return nil, err
	}
	subject := []any{map[string]any{"kind": "ServiceAccount", "name": sa, "namespace": "kargo-latch"}}
	bound, guarded := 0, 0
	var kept []*unstructured.Unstructured
	for _, o := range objs {
		if strings.HasSuffix(o.GetName(), "-verify-on-latch-marker") {
			// The guard that only kargo-latch may mark a run binds every
			// other identity: cluster-wide, it would refuse the other
			// operators the tests run. TestVerifyOnLatchGuard tries it in
			// a namespace of its own.
			continue
		}
		switch o.GetKind() {
		case "ClusterRoleBinding":
			shipped, _, _ := unstructured.NestedSlice(o.Object, "subjects")
			if len(shipped) != 1 || fmt.Sprint(shipped[0]) != fmt.Sprint(map[string]any{"kind": "ServiceAccount", "name": "kargo-latch", "namespace": "kargo-latch"}) {
				return nil, fmt.Errorf("component binding %s binds %v, want the ServiceAccount kargo-latch/kargo-latch", o.GetName(), shipped)
			}
			o.SetName("e2e-" + o.GetName() + "-" + suffix)
			o.Object["subjects"] = subject
			bound++
		case "ValidatingAdmissionPolicy":
			// A guard knows the operator by its param, the ServiceAccount
			// the binding names.
			kind, _, _ := unstructured.NestedString(o.Object, "spec", "paramKind", "kind")
			conds, _, _ := unstructured.NestedSlice(o.Object, "spec", "matchConditions")
			if kind != "ServiceAccount" || len(conds) != 1 || !strings.Contains(fmt.Sprint(conds[0]), "params.metadata.name") {
				return nil, fmt.Errorf("guard %s does not match the ServiceAccount it is bound to: %v %v", o.GetName(), kind, conds)
			}
			o.SetName("e2e-" + o.GetName() + "-" + suffix)
			guarded++
		case "ValidatingAdmissionPolicyBinding":
			ref, _, _ := unstructured.NestedStringMap(o.Object, "spec", "paramRef")
			if ref["name"] != "kargo-latch" || ref["namespace"] != "kargo-latch" {
				return nil, fmt.Errorf("guard binding %s is bound to %v, want the ServiceAccount kargo-latch/kargo-latch", o.GetName(), ref)
			}
			policy, _, _ := unstructured.NestedString(o.Object, "spec", "policyName")
			o.SetName("e2e-" + o.GetName() + "-" + suffix)
			_ = unstructured.SetNestedField(o.Object, "e2e-"+policy+"-"+suffix, "spec", "policyName")
			_ = unstructured.SetNestedField(o.Object, sa, "spec", "paramRef", "name")
		case "Deployment":
			// A component's patch of the operator's Deployment: the tests run
			// the operator themselves.
			continue
		}
		kept = append(kept, o)
	}
	if bound < len(components) || guarded < len(components) {
		return nil, fmt.Errorf("components %v bind %d ClusterRoles and guard %d times, want one each", components, bound, guarded)
	}
	return append(kept,
		&unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ServiceAccount",
			"metadata": map[string]any{"name": sa, "namespace": "kargo-latch"},
		}},
		&unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
			"metadata": map[string]any{"name": "e2e-kargo-latch-" + suffix},
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kargo-latch"},
			"subjects": subject,
		}},
	), nil
}
