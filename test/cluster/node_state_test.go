package cluster

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNodeLockKeepsOneNode: a second lock while the first is held fails,
// naming the holder's pid (flock locks conflict between two opens in one
// process too); once released, the lock is free again.
func TestNodeLockKeepsOneNode(t *testing.T) {
	defer func(was string) { nodeLockFile = was }(nodeLockFile)
	nodeLockFile = filepath.Join(t.TempDir(), "run", "lock")
	first, err := lockNode()
	if err != nil {
		t.Fatal(err)
	}
	if second, err := lockNode(); err == nil {
		releaseNodeLock(second)
		t.Fatal("a second lock while the first is held succeeded")
	} else if !strings.Contains(err.Error(), "process "+strconv.Itoa(os.Getpid())+" holds") {
		t.Errorf("the refusal names no holder's pid: %v", err)
	}
	releaseNodeLock(first)
	again, err := lockNode()
	if err != nil {
		t.Fatalf("the lock released is still held: %v", err)
	}
	releaseNodeLock(again)
}

// TestSysctlsRestored: what the kubelet changes after saveSysctls,
// restoreSysctls puts back, and removes the saved file; saved values a
// killed node left (not restored) are kept by the next save.
func TestSysctlsRestored(t *testing.T) {
	defer func(wasProc, wasSaved string) { procSys, sysctlsSaved = wasProc, wasSaved }(procSys, sysctlsSaved)
	dir := t.TempDir()
	procSys = filepath.Join(dir, "proc-sys")
	sysctlsSaved = filepath.Join(dir, "run", "sysctl.saved")
	set := func(name, value string) {
		p := sysctlPath(name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(value+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	get := func(name string) string {
		b, err := os.ReadFile(sysctlPath(name))
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(b))
	}
	set("kernel.panic", "0")
	set("vm.overcommit_memory", "0")
	if err := saveSysctls(); err != nil {
		t.Fatal(err)
	}
	// The kubelet's values; a killed node's save is kept by the next.
	set("kernel.panic", "10")
	set("vm.overcommit_memory", "1")
	if err := saveSysctls(); err != nil {
		t.Fatal(err)
	}
	if err := restoreSysctls(); err != nil {
		t.Fatal(err)
	}
	if got := get("kernel.panic") + " " + get("vm.overcommit_memory"); got != "0 0" {
		t.Errorf("kernel.panic and vm.overcommit_memory are %s after the restore, want 0 0", got)
	}
	if _, err := os.Stat(sysctlsSaved); !os.IsNotExist(err) {
		t.Errorf("the saved file is still there after the restore: %v", err)
	}
}
