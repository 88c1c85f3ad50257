package cluster

import (
	"bufio"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// What the node makes on the machine outside its own directory, and how
// Stop removes it: the Pods' cgroups, the kubelet's links to their logs,
// and the CNI plugins' cache of results. (The Pods' network namespaces and
// the bridge are node_network.go's.)

// nodeCgroupRoot is the cgroup under which the kubelet makes its kubepods
// tree, in every hierarchy: a root of the node's own, so that its Pods'
// cgroups meet nobody else's and Stop removes them all.
const nodeCgroupRoot = "/kargo-latch-node"

// cgroupMounts are the mount points of the machine's cgroup hierarchies,
// v1 and v2.
func cgroupMounts() []string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	defer func() { _ = f.Close() }()
	var mounts []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		// The fields after " - " are the filesystem type, the source and
		// the super options.
		fields := strings.Fields(s.Text())
		sep := slices.Index(fields, "-")
		if sep > 4 && sep+1 < len(fields) && (fields[sep+1] == "cgroup" || fields[sep+1] == "cgroup2") {
			mounts = append(mounts, fields[4])
		}
	}
	return mounts
}

// createCgroupRoot makes nodeCgroupRoot in every hierarchy, as the kubelet
// wants it to exist; a cpuset cgroup gets its parent's CPUs and memory
// nodes, without which nothing may run in it.
func createCgroupRoot() error {
	for _, m := range cgroupMounts() {
		dir := filepath.Join(m, nodeCgroupRoot)
		if err := os.Mkdir(dir, 0o750); err != nil && !errors.Is(err, os.ErrExist) {
			return err
		}
		for _, file := range []string{"cpuset.cpus", "cpuset.mems"} {
			own, err := os.ReadFile(filepath.Join(dir, file))
			if err != nil || strings.TrimSpace(string(own)) != "" {
				continue
			}
			parent, err := os.ReadFile(filepath.Join(m, file))
			if err != nil {
				return err
			}
			if err := os.WriteFile(filepath.Join(dir, file), parent, 0o644); err != nil { //nolint:gosec // a cgroup's file
				return err
			}
		}
	}
	return nil
}

// reclaimKilledNode undoes what a node killed before its Stop (a test
// killed outright) left: it kills its shims, which name its containerd's
// socket in its directory, and its Pods' processes, in the cgroup root;
// removes its Pods' network namespaces and those cgroups; puts back the
// kernel settings its kubelet changed; and detaches the mounts under its
// directory, removed too unless KARGO_LATCH_KEEP_CLUSTER_DIR keeps it, with
// the kubelet's links to the logs there. It tells how many processes it
// killed. Only with the node's lock (node_lock.go): a running node's are
// the same.
func reclaimKilledNode(say func(string, ...any)) int {
	prefix := filepath.Join(os.TempDir(), nodeDirPrefix)
	killed := killShimsNaming(prefix)
	killed += killCgroupProcesses()
	removeCNIAttachments()
	removeCgroupRoot()
	if err := restoreSysctls(); err != nil {
		say("node: the kernel settings a killed node's kubelet changed stay changed: %v", err)
	}
	dirs, _ := filepath.Glob(prefix + "*")
	for _, dir := range dirs {
		unmountUnder(dir)
		removeLogLinks(dir)
		if os.Getenv("KARGO_LATCH_KEEP_CLUSTER_DIR") == "" {
			_ = os.RemoveAll(dir)
		}
	}
	return killed
}

// killCgroupProcesses kills every process in the cgroups under
// nodeCgroupRoot: the Pods' containers and sandboxes, all the node's by
// construction, whether or not their runtime is still there to stop them.
// It tells how many.
func killCgroupProcesses() int {
	killed := map[int]bool{}
	for _, m := range cgroupMounts() {
		_ = filepath.WalkDir(filepath.Join(m, nodeCgroupRoot), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil //nolint:nilerr // a cgroup gone meanwhile has nothing left to kill
			}
			b, _ := os.ReadFile(p) //nolint:gosec // a cgroup's list of processes
			for _, field := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(field); err == nil && pid > 1 && !killed[pid] && syscall.Kill(pid, syscall.SIGKILL) == nil {
					killed[pid] = true
				}
			}
			return nil
		})
	}
	return len(killed)
}

// removeCgroupRoot removes nodeCgroupRoot and every cgroup under it,
// deepest first, once their processes are gone (the kernel refuses to
// remove a cgroup that has any, so nothing running is touched).
func removeCgroupRoot() {
	var dirs []string
	for _, m := range cgroupMounts() {
		_ = filepath.WalkDir(filepath.Join(m, nodeCgroupRoot), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
	}
	slices.SortFunc(dirs, func(a, b string) int { return len(b) - len(a) })
	for _, d := range dirs {
		// A killed container's processes take a moment to leave.
		for range 50 {
			err := syscall.Rmdir(d)
			if err == nil || errors.Is(err, syscall.ENOENT) || !errors.Is(err, syscall.EBUSY) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// containerLogLinks is where the kubelet links each container's log
// (fixed in the kubelet; podLogsDir holds the logs themselves).
const containerLogLinks = "/var/log/containers"

// removeLogLinks removes the kubelet's links to logs under dir.
func removeLogLinks(dir string) {
	entries, _ := os.ReadDir(containerLogLinks)
	for _, e := range entries {
		p := filepath.Join(containerLogLinks, e.Name())
		if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, dir+"/") {
			_ = os.Remove(p)
		}
	}
}

// cniResults is where the CNI library containerd uses caches each Pod's
// attachment, named after the network ("<network>-<sandbox>-<interface>",
// "cni-loopback-<sandbox>-lo"), with the network namespace it attached.
// The CRI's teardown removes them; Stop kills the sandboxes without it.
const cniResults = "/var/lib/cni/results"

// removeCNIAttachments removes the network namespaces the node's network
// attached Pods in, as its cached results name them, and those results
// with their loopback's.
func removeCNIAttachments() {
	entries, _ := os.ReadDir(cniResults)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), cniNetwork+"-") {
			continue
		}
		p := filepath.Join(cniResults, e.Name())
		var cached struct {
			ContainerID string `json:"containerId"`
			Result      struct {
				Interfaces []struct {
					Sandbox string `json:"sandbox"`
				} `json:"interfaces"`
			} `json:"result"`
		}
		b, err := os.ReadFile(p)
		if err != nil || json.Unmarshal(b, &cached) != nil {
			continue
		}
		for _, i := range cached.Result.Interfaces {
			if filepath.Dir(i.Sandbox) == netnsDir && strings.HasPrefix(filepath.Base(i.Sandbox), "cni-") {
				_ = syscall.Unmount(i.Sandbox, syscall.MNT_DETACH)
				_ = os.Remove(i.Sandbox)
			}
		}
		_ = os.Remove(p)
		if cached.ContainerID != "" {
			_ = os.Remove(filepath.Join(cniResults, "cni-loopback-"+cached.ContainerID+"-lo"))
		}
	}
}
