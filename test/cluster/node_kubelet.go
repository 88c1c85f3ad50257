package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// kubeletConfig is the kubelet's configuration on a machine like this one:
//   - failCgroupV1: false: the cgroup layout is v1, with cgroup2 mounted at
//     /sys/fs/cgroup/unified, which kubelet 1.37 refuses by default;
//   - cgroupDriver: cgroupfs: containerd 1.6 does not answer the CRI
//     RuntimeConfig call, so the kubelet uses its own setting (and warns
//     that this ends in 1.38);
//   - failSwapOn: false and enforceNodeAllocatable: [], as the machine is
//     not the kubelet's alone;
//   - anonymous access with AlwaysAllow, on the bridge's gateway only, so
//     that the API server reaches it for logs with no client certificate;
//   - no image garbage collection and no disk eviction, whatever else the
//     machine keeps on its disk;
//   - what it would leave on the machine kept to the node's own: the Pods'
//     cgroups under a root of their own (nodeCgroupRoot, which Stop
//     removes), their logs and the volume plugins' directory under the
//     node's directory, and no iptables chains (makeIPTablesUtilChains
//     makes them for kube-proxy, which the node does without); the kernel
//     settings it changes are saved before it starts and put back by Stop
//     (node_sysctl.go).
const kubeletConfig = `apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false
cgroupDriver: cgroupfs
cgroupRoot: %[4]s
failSwapOn: false
enforceNodeAllocatable: []
makeIPTablesUtilChains: false
containerRuntimeEndpoint: unix://%[1]s
podLogsDir: %[2]s
volumePluginDir: %[5]s
address: %[3]s
healthzBindAddress: 127.0.0.1
readOnlyPort: 0
authentication:
  anonymous: {enabled: true}
  webhook: {enabled: false}
authorization:
  mode: AlwaysAllow
imageGCHighThresholdPercent: 100
evictionHard: {memory.available: "1Mi", nodefs.available: "1%%", imagefs.available: "1%%"}
serializeImagePulls: false
nodeStatusUpdateFrequency: 4s
`

// startKubelet writes the kubelet's configuration and credentials, starts
// it, and waits for its Node to be Ready.
func (n *Node) startKubelet(ctx context.Context, say func(string, ...any)) error {
	if err := createCgroupRoot(); err != nil {
		return fmt.Errorf("making the Pods' cgroup root %s: %w", nodeCgroupRoot, err)
	}
	if err := saveSysctls(); err != nil {
		return fmt.Errorf("saving the kernel settings the kubelet changes: %w", err)
	}
	config := filepath.Join(n.Dir, "kubelet.yaml")
	if err := os.WriteFile(config, fmt.Appendf(nil, kubeletConfig, n.socket, filepath.Join(n.Dir, "pod-logs"), nodeGateway,
		nodeCgroupRoot, filepath.Join(n.Dir, "volume-plugins")), 0o600); err != nil {
		return err
	}
	kubeconfig := filepath.Join(n.Dir, "kubelet.kubeconfig")
	if err := WriteKubeconfig(kubeconfig, n.cluster.UserConfig(kubeletToken), ""); err != nil {
		return err
	}
	say("node: starting kubelet as Node %s", n.Name)
	var err error
	n.kubelet, err = n.startProcess("kubelet", n.bin("kubelet"),
		"--config", config,
		"--kubeconfig", kubeconfig,
		"--root-dir", filepath.Join(n.Dir, "kubelet"),
		"--cert-dir", filepath.Join(n.Dir, "kubelet-certs"),
		"--hostname-override", n.Name,
		// The API server reaches the kubelet at the Node's InternalIP
		// (kubectl logs), never by name through DNS. Not 127.0.0.1: the
		// kubelet then sets no address at all on the Node ("nodeIP can't
		// be loopback address"); the bridge's gateway is this machine's
		// too, and nothing outside reaches it.
		"--node-ip", nodeGateway,
		"--v", "1",
	)
	if err != nil {
		return err
	}
	if err := n.waitNodeReady(ctx); err != nil {
		return err
	}
	say("node: %s Ready (%s)", n.Name, containerdVersion())
	return nil
}
