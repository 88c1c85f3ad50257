package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The node: a kubelet, containerd, runc and the CNI bridge on this machine,
// registered with the test cluster, so that the chart's Deployment runs as
// Pods of the image pulled from a registry on loopback. Only one node runs
// on a machine at a time (the kubelet's ports, the bridge), and only as
// root. docs/development.md ("The node") tells what each part is for.
//
// Pods reach the API server through the `kubernetes` Service with no
// kube-proxy: the service range's first address, the Service's ClusterIP,
// is the bridge's gateway, where the API server is bound on the Service's
// port, 443. So KUBERNETES_SERVICE_HOST:PORT is the API server itself, and
// no address translation (iptables) is needed.
const (
	// NodeName is the Node's name, and the kubelet's user's.
	NodeName = "kargo-latch-node"
	// nodeBridge is the Pods' bridge; nodeGateway its address, the API
	// server's, and the `kubernetes` Service's ClusterIP.
	nodeBridge      = "kl-br0"
	nodeGateway     = "10.213.0.1"
	nodeSubnet      = "10.213.0.0/16"
	nodeServiceCIDR = "10.213.0.0/28"
	// The Pods' addresses, apart from the services'.
	nodePodsFirst = "10.213.1.2"
	nodePodsLast  = "10.213.1.254"
	// nodeDirPrefix starts the name of the node's directory, in the
	// temporary directory.
	nodeDirPrefix = "kargo-latch-node-"
	// pauseImage is the sandbox image the node builds and imports.
	pauseImage = "kargo-latch.test/pause:1"
)

// Node is a running kubelet with its container runtime, plus the
// cluster's scheduler and the controllers Deployments need.
type Node struct {
	// Name is the Node's.
	Name string
	// Registry is the host:port of the registry on loopback containerd
	// pulls from (plain HTTP).
	Registry string
	// Dir holds the node's configuration, state and logs.
	Dir string

	cluster  *Cluster
	registry func()
	// containerd's socket.
	socket string
	// The lock that keeps one node per machine, held until Stop ends.
	lock *os.File

	containerd, kubelet, scheduler, controllerManager *exec.Cmd
}

// StartWithNode starts a cluster as Start does, whose API server the
// node's Pods reach, and a node registered with it and Ready. Stop the node
// before the cluster.
func StartWithNode(ctx context.Context, opts Options) (_ *Cluster, _ *Node, err error) {
	say := opts.Log
	if say == nil {
		say = func(string, ...any) {}
	}
	if os.Geteuid() != 0 {
		return nil, nil, errors.New("the node needs root (a kubelet, containerd and a bridge)")
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, nil, err
	}
	for _, bin := range []string{"kubelet", "kube-scheduler", "kube-controller-manager"} {
		if _, err := os.Stat(filepath.Join(root, "bin", bin)); err != nil {
			return nil, nil, fmt.Errorf("bin/%s is missing: run `make node cluster` first", bin)
		}
	}
	for _, tool := range []string{"containerd", "runc", "ctr", "ip", "/usr/lib/cni/bridge"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, nil, fmt.Errorf("%s is missing: run `make node-runtime` (it installs Debian's containerd, runc, CNI plugins and iproute2)", tool)
		}
	}
	lock, err := lockNode()
	if err != nil {
		return nil, nil, err
	}
	// With the lock, whatever a node left was left by one killed outright.
	if reclaimed := reclaimKilledNode(say); reclaimed > 0 {
		say("node: killed %d processes a node killed before its Stop left", reclaimed)
	}
	dir, err := os.MkdirTemp("", nodeDirPrefix)
	if err != nil {
		releaseNodeLock(lock)
		return nil, nil, err
	}
	n := &Node{Name: NodeName, Dir: dir, lock: lock}
	defer func() {
		if err != nil {
			n.Stop()
		}
	}()
	say("node: creating the Pods' bridge %s (%s, gateway %s)", nodeBridge, nodeSubnet, nodeGateway)
	if err := createBridge(); err != nil {
		return nil, nil, err
	}
	opts.Tokens = append(opts.Tokens,
		kubeletToken+",system:node:"+NodeName+",system:node:"+NodeName+",\"system:nodes\"",
		schedulerToken+",system:kube-scheduler,system:kube-scheduler,",
	)
	// The node's own controller manager runs the controllers Deployments
	// need as well as those Start's would.
	opts.ControllerManager = false
	opts.APIServerArgs = map[string]string{
		"--bind-address":                    nodeGateway,
		"--advertise-address":               nodeGateway,
		"--secure-port":                     "443",
		"--service-cluster-ip-range":        nodeServiceCIDR,
		"--kubelet-preferred-address-types": "InternalIP",
		"--disable-admission-plugins":       "", // ServiceAccount mounts the Pods' tokens
	}
	c, err := Start(ctx, opts)
	if err != nil {
		return nil, nil, err
	}
	n.cluster = c
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if err := n.startControlPlane(ctx, say); err != nil {
		return c, nil, err
	}
	if err := n.startContainerd(ctx, say); err != nil {
		return c, nil, err
	}
	if err := n.startRegistry(); err != nil {
		return c, nil, err
	}
	say("node: registry on http://%s", n.Registry)
	if err := n.startKubelet(ctx, say); err != nil {
		return c, nil, err
	}
	return c, n, nil
}

// waitNodeReady waits for the Node to be registered and Ready.
func (n *Node) waitNodeReady(ctx context.Context) error {
	kube, err := kubernetes.NewForConfig(n.cluster.Config)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Minute)
	last := "not registered"
	for time.Now().Before(deadline) {
		if exited(n.kubelet) {
			return fmt.Errorf("the kubelet exited; see %s", filepath.Join(n.Dir, "kubelet.log"))
		}
		node, err := kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err == nil {
			for _, cond := range node.Status.Conditions {
				if cond.Type == corev1.NodeReady {
					if cond.Status == corev1.ConditionTrue && len(node.Spec.Taints) == 0 {
						return nil
					}
					last = fmt.Sprintf("Ready=%s (%s), taints %v", cond.Status, cond.Message, node.Spec.Taints)
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
	return fmt.Errorf("node %s not Ready after 2m: %s; see %s", n.Name, last, filepath.Join(n.Dir, "kubelet.log"))
}

// Stop stops the kubelet, the Pods' containers, containerd and the
// controllers, removes the Pods' network, cgroups and log links
// (node_host.go) and the node's directory (kept with
// KARGO_LATCH_KEEP_CLUSTER_DIR), puts back the kernel settings the kubelet
// changed (node_sysctl.go), and releases the node's lock.
func (n *Node) Stop() {
	for _, p := range []*exec.Cmd{n.kubelet, n.scheduler, n.controllerManager} {
		stopProcess(p)
	}
	n.stopContainers()
	stopProcess(n.containerd)
	n.killShims()
	killCgroupProcesses()
	if n.registry != nil {
		n.registry()
	}
	removeCNIAttachments()
	_ = exec.Command("ip", "link", "del", nodeBridge).Run()
	unmountUnder(n.Dir)
	removeCgroupRoot()
	removeLogLinks(n.Dir)
	if err := restoreSysctls(); err != nil {
		fmt.Fprintf(os.Stderr, "node: the kernel settings the kubelet changed stay changed: %v (their values before it are in %s)\n", err, sysctlsSaved)
	}
	if os.Getenv("KARGO_LATCH_KEEP_CLUSTER_DIR") == "" {
		_ = os.RemoveAll(n.Dir)
	}
	releaseNodeLock(n.lock)
}

func stopProcess(p *exec.Cmd) {
	if p != nil && p.Process != nil {
		_ = p.Process.Kill()
		_ = p.Wait()
	}
}

// startProcess runs path with args, logging to name.log in the node's
// directory; it dies with the test process.
func (n *Node) startProcess(name, path string, args ...string) (*exec.Cmd, error) {
	logFile, err := os.OpenFile(filepath.Join(n.Dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// A process group of its own: a terminal's Ctrl-C reaches the test
	// or the demo alone, whose Stop then stops the node in order (a
	// containerd stopped first would leave its containers running).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	return cmd, nil
}

// bin is the path of a binary `make node cluster` built.
func (n *Node) bin(name string) string { return filepath.Join(n.cluster.Root, "bin", name) }

// freePort is one free loopback port, as a flag's value.
func freePort() (string, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return "", err
	}
	return strconv.Itoa(ports[0]), nil
}
