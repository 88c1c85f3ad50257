package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// nodeControllers are the controllers of the node's kube-controller-manager:
// Start's (namespace, garbagecollector), those that turn a Deployment into
// Pods, the one that lifts a new Node's not-ready taint, the one that
// publishes the CA the Pods' token volumes hold (kube-root-ca.crt), and the
// EndpointSlices of the metrics Service.
var nodeControllers = []string{
	"namespace", "garbagecollector", "deployment", "replicaset",
	"nodelifecycle", "root-ca-cert-publisher", "endpointslice",
}

// startControlPlane grants the kubelet its role, and starts the
// controller manager and the scheduler.
func (n *Node) startControlPlane(ctx context.Context, say func(string, ...any)) error {
	// The bootstrap policy's system:node role, bound as before the Node
	// authorizer: the API server authorizes with RBAC alone.
	if err := Apply(ctx, n.cluster.Config, BindGroup("kargo-latch-test-nodes", "system:node", "system:nodes")); err != nil {
		return err
	}
	// The API server's self-signed serving certificate, with its CA: what
	// Pods trust (kube-root-ca.crt).
	caFile := filepath.Join(n.cluster.Dir, "certs", "apiserver.crt")
	if _, err := os.Stat(caFile); err != nil {
		return fmt.Errorf("the API server's certificate: %w", err)
	}
	kcmConfig := filepath.Join(n.Dir, "kube-controller-manager.kubeconfig")
	if err := WriteKubeconfig(kcmConfig, n.cluster.UserConfig(controllerManagerToken), ""); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	say("node: starting kube-controller-manager (%s)", strings.Join(nodeControllers, ", "))
	n.controllerManager, err = n.startProcess("kube-controller-manager", n.bin("kube-controller-manager"),
		"--kubeconfig", kcmConfig,
		"--controllers", strings.Join(nodeControllers, ","),
		"--use-service-account-credentials",
		"--root-ca-file", caFile,
		"--leader-elect=false",
		"--bind-address", "127.0.0.1", "--secure-port", port,
		"--cert-dir", filepath.Join(n.Dir, "kcm-certs"),
		// A Node that stops answering is NotReady within 20s, not 50s.
		"--node-monitor-grace-period", "20s",
		"--v", "1",
	)
	if err != nil {
		return err
	}
	schedConfig := filepath.Join(n.Dir, "kube-scheduler.kubeconfig")
	if err := WriteKubeconfig(schedConfig, n.cluster.UserConfig(schedulerToken), ""); err != nil {
		return err
	}
	if port, err = freePort(); err != nil {
		return err
	}
	say("node: starting kube-scheduler")
	n.scheduler, err = n.startProcess("kube-scheduler", n.bin("kube-scheduler"),
		"--kubeconfig", schedConfig,
		"--authentication-kubeconfig", schedConfig,
		"--authorization-kubeconfig", schedConfig,
		"--leader-elect=false",
		"--bind-address", "127.0.0.1", "--secure-port", port,
		"--cert-dir", filepath.Join(n.Dir, "scheduler-certs"),
		"--v", "1",
	)
	if err != nil {
		return err
	}
	// Both are up when they have not exited a moment later; what they do
	// shows in the Node's readiness and the Pods'.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(500 * time.Millisecond):
	}
	for name, p := range map[string]bool{"kube-controller-manager": exited(n.controllerManager), "kube-scheduler": exited(n.scheduler)} {
		if p {
			return fmt.Errorf("%s exited; see %s", name, filepath.Join(n.Dir, name+".log"))
		}
	}
	return nil
}

// BindGroup binds a ClusterRole to a group in every namespace.
func BindGroup(name, role, group string) *unstructured.Unstructured {
	b := BindUser(name, role, group)
	b.Object["subjects"] = []any{map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}}
	return b
}
