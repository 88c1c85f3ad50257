package cluster

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The kernel settings the kubelet changes on the machine when it starts
// (it sets them to its defaults unless protectKernelDefaults, which would
// instead refuse to start on a machine whose values differ). The node
// saves their values before the kubelet starts and puts them back in Stop,
// or in the next start after a node killed outright. (The CNI bridge
// plugin would also turn on net.ipv4.ip_forward as a gateway; the node's
// network is no gateway, node_network.go.)
var kubeletSysctls = []string{
	"kernel.keys.root_maxbytes",
	"kernel.keys.root_maxkeys",
	"kernel.panic",
	"kernel.panic_on_oops",
	"vm.overcommit_memory",
	"vm.panic_on_oom",
}

// nodeRunDir holds what outlives a node killed outright: the lock that
// keeps one node per machine (node_lock.go) and the saved kernel settings.
const nodeRunDir = "/run/kargo-latch-node"

// sysctlsSaved is where the node saves the kernel settings' values, one
// "name value" a line.
var sysctlsSaved = filepath.Join(nodeRunDir, "sysctl.saved")

// procSys is where the kernel's settings are files.
var procSys = "/proc/sys"

func sysctlPath(name string) string {
	return filepath.Join(procSys, strings.ReplaceAll(name, ".", "/"))
}

// saveSysctls saves the kernel settings the kubelet changes, unless a
// killed node's saved values (the machine's, from before it) are there
// still, not restored (reclaimKilledNode said why): those are the
// machine's, kept.
func saveSysctls() error {
	if err := os.MkdirAll(filepath.Dir(sysctlsSaved), 0o700); err != nil {
		return err
	}
	if _, err := os.Stat(sysctlsSaved); err == nil {
		return nil // a killed node's, not restored: the machine's own values
	}
	var saved strings.Builder
	for _, name := range kubeletSysctls {
		v, err := os.ReadFile(sysctlPath(name))
		if err != nil {
			continue // not in this kernel: the kubelet cannot change it either
		}
		fmt.Fprintf(&saved, "%s %s\n", name, strings.TrimSpace(string(v)))
	}
	return os.WriteFile(sysctlsSaved, []byte(saved.String()), 0o600)
}

// restoreSysctls writes the saved kernel settings back and removes the
// saved file; it tells which it could not restore.
func restoreSysctls() error {
	b, err := os.ReadFile(sysctlsSaved)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var errs []error
	for _, line := range strings.Split(string(b), "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		current, err := os.ReadFile(sysctlPath(name))
		if err == nil && strings.TrimSpace(string(current)) == value {
			continue
		}
		if err := os.WriteFile(sysctlPath(name), []byte(value), 0o644); err != nil { //nolint:gosec // a kernel setting
			errs = append(errs, fmt.Errorf("restoring %s to %s: %w", name, value, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return os.Remove(sysctlsSaved)
}
