package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// One node per machine: the kubelet's ports, the bridge, the cgroup root
// and the saved kernel settings are the machine's, and a start reclaims
// what a killed node left, which would wreck a running one. So the node
// holds an exclusive lock for its lifetime; the kernel releases it when
// its process ends, however it ends, and only then may the next start
// reclaim.
var nodeLockFile = filepath.Join(nodeRunDir, "lock")

// lockNode takes the node's lock, with this process's pid in it, or
// tells which process holds it. Release it with releaseNodeLock.
func lockNode() (*os.File, error) {
	if err := os.MkdirAll(filepath.Dir(nodeLockFile), 0o700); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(nodeLockFile, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(nodeLockFile)
		_ = f.Close()
		return nil, fmt.Errorf("another node runs on this machine (process %s holds %s: a second make e2e-node, or a DEMO_KEEP demo); stop it first: %w",
			strings.TrimSpace(string(holder)), nodeLockFile, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// releaseNodeLock lets the next node start.
func releaseNodeLock(f *os.File) {
	if f != nil {
		_ = f.Truncate(0)
		_ = f.Close()
	}
}
