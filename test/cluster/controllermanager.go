package cluster

import (
	"path/filepath"
	"strconv"
)

// kube-controller-manager signs in as the user the bootstrap RBAC policy
// knows, and, as in kubeadm clusters, runs each controller with its own
// kube-system ServiceAccount (--use-service-account-credentials). So the
// garbage collector and the namespace controller act as
// system:serviceaccount:kube-system:generic-garbage-collector and
// ...:namespace-controller, which is what our admission policies see in
// production.
// Its token is drawn per process (tokens.go).
const controllerManagerUser = "system:kube-controller-manager"

// startControllerManager is called once the CRDs are established, so the
// garbage collector's first discovery already knows Stages and StagePauses.
func (c *Cluster) startControllerManager() error {
	kubeconfig := filepath.Join(c.Dir, "kube-controller-manager.kubeconfig")
	if err := WriteKubeconfig(kubeconfig, c.UserConfig(controllerManagerToken), ""); err != nil {
		return err
	}
	ports, err := FreePorts(1)
	if err != nil {
		return err
	}
	c.controllerManager, err = c.start("kube-controller-manager",
		"--kubeconfig", kubeconfig,
		"--controllers", "namespace,garbagecollector",
		"--use-service-account-credentials",
		"--leader-elect=false",
		"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(ports[0]),
		"--cert-dir", filepath.Join(c.Dir, "kcm-certs"),
		"--v", "1",
	)
	return err
}
