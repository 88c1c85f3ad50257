package cluster

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// The Pods' network: a bridge of the node's own, with the gateway address
// the API server binds to, made before the API server starts; the CNI
// bridge plugin attaches each Pod to it with an address from host-local.
// Nothing leaves the node: no masquerade, no route out of the subnet, and
// no gateway (isGateway false), so the bridge plugin leaves the machine's
// IP forwarding as it is. The Pods reach the bridge's address, the API
// server's, on their own subnet.

// createBridge makes the bridge with its gateway address, replacing one a
// killed test left.
func createBridge() error {
	_ = exec.Command("ip", "link", "del", nodeBridge).Run()
	for _, args := range [][]string{
		{"link", "add", nodeBridge, "type", "bridge"},
		{"addr", "add", nodeGateway + "/16", "dev", nodeBridge},
		{"link", "set", nodeBridge, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// cniNetwork is the name of the Pods' CNI network.
const cniNetwork = "kargo-latch-node"

// writeCNIConfig writes the bridge network's conflist into dir/net.d, with
// host-local's leases in dir/ipam.
func writeCNIConfig(dir string) error {
	if err := os.MkdirAll(filepath.Join(dir, "net.d"), 0o700); err != nil {
		return err
	}
	conf := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %q,
  "plugins": [
    {
      "type": "bridge",
      "bridge": %q,
      "isGateway": false,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": %q,
        "ranges": [[{"subnet": %q, "rangeStart": %q, "rangeEnd": %q, "gateway": %q}]]
      }
    }
  ]
}
`, cniNetwork, nodeBridge, filepath.Join(dir, "ipam"), nodeSubnet, nodePodsFirst, nodePodsLast, nodeGateway)
	return os.WriteFile(filepath.Join(dir, "net.d", "10-kargo-latch-node.conflist"), []byte(conf), 0o600)
}

// netnsDir is where containerd's CRI plugin pins the Pods' network
// namespaces.
const netnsDir = "/var/run/netns"

// unmountUnder detaches every mount under dir (the Pods' volumes, their
// root filesystems), deepest first, so that dir can be removed.
func unmountUnder(dir string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return
	}
	defer func() { _ = f.Close() }()
	var points []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			points = append(points, fields[4])
		}
	}
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, p := range points {
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
	}
}
