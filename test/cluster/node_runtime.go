package cluster

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// containerdConfig is containerd 1.6's configuration for the node: its own
// socket, state and runc root under the node's directory, so that it never
// meets another containerd; the CRI plugin with the sandbox image the node
// builds, the CNI configuration the node writes, and registries' hosts
// files (the loopback registry is plain HTTP).
//
// restrict_oom_score_adj: runc otherwise sets a Pod sandbox's
// oom_score_adj to -998, which needs CAP_SYS_RESOURCE, which machines like
// this one's sandbox lack ("can't get final child's PID from pipe: EOF").
const containerdConfig = `version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper"]

[grpc]
  address = %[3]q

[plugins."io.containerd.internal.v1.opt"]
  path = %[4]q

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[5]q
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        Root = %[6]q
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[7]q
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = %[8]q
`

// startContainerd writes the CNI and containerd configurations, starts
// containerd, and imports the sandbox image.
func (n *Node) startContainerd(ctx context.Context, say func(string, ...any)) error {
	d := filepath.Join(n.Dir, "containerd")
	n.socket = filepath.Join(d, "containerd.sock")
	cniDir := filepath.Join(n.Dir, "cni")
	if err := writeCNIConfig(cniDir); err != nil {
		return err
	}
	config := filepath.Join(d, "config.toml")
	if err := os.MkdirAll(d, 0o700); err != nil {
		return err
	}
	content := fmt.Sprintf(containerdConfig, filepath.Join(d, "root"), filepath.Join(d, "state"), n.socket,
		filepath.Join(d, "opt"), pauseImage, filepath.Join(d, "runc"), filepath.Join(cniDir, "net.d"), filepath.Join(d, "certs.d"))
	if err := os.WriteFile(config, []byte(content), 0o600); err != nil {
		return err
	}
	say("node: starting containerd (%s)", containerdVersion())
	var err error
	if n.containerd, err = n.startProcess("containerd", "containerd", "--config", config); err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if exited(n.containerd) {
			return fmt.Errorf("containerd exited; see %s", filepath.Join(n.Dir, "containerd.log"))
		}
		if err := n.ctr(ctx, nil, "version"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("containerd not answering after 30s; see %s", filepath.Join(n.Dir, "containerd.log"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	say("node: building the sandbox image %s and importing it", pauseImage)
	archive, err := n.buildPauseImage(ctx)
	if err != nil {
		return err
	}
	return n.ctr(ctx, nil, "-n", "k8s.io", "images", "import", archive)
}

func containerdVersion() string {
	out, err := exec.Command("containerd", "--version").Output()
	if err != nil {
		return "containerd: " + err.Error()
	}
	return strings.TrimSpace(string(out))
}

// ctr runs containerd's client on the node's socket, its output into out
// (nil: in the error only).
func (n *Node) ctr(ctx context.Context, out io.Writer, args ...string) error {
	cmd := exec.CommandContext(ctx, "ctr", append([]string{"--address", n.socket}, args...)...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = out, &stderr
	if out == nil {
		cmd.Stdout = &stderr
	}
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	return nil
}

// buildPauseImage builds test/cluster/pause, static, into a one-file image
// written as an archive `ctr images import` reads.
func (n *Node) buildPauseImage(ctx context.Context) (string, error) {
	bin := filepath.Join(n.Dir, "pause")
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./test/cluster/pause")
	build.Dir = n.cluster.Root
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building the pause program: %w\n%s", err, out)
	}
	content, err := os.ReadFile(bin)
	if err != nil {
		return "", err
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
		return "", err
	}
	if _, err := tw.Write(content); err != nil {
		return "", err
	}
	if err := tw.Close(); err != nil {
		return "", err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(layer.Bytes())), nil })
	if err != nil {
		return "", err
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return "", err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return "", err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config = v1.Config{Entrypoint: []string{"/pause"}, User: "65535:65535"}
	if img, err = mutate.ConfigFile(img, cfg); err != nil {
		return "", err
	}
	tag, err := name.NewTag(pauseImage)
	if err != nil {
		return "", err
	}
	archive := filepath.Join(n.Dir, "pause.tar")
	return archive, tarball.WriteToFile(archive, tag, img)
}

// startRegistry serves go-containerregistry's registry on loopback, plain
// HTTP, and tells containerd to pull from it over HTTP.
func (n *Node) startRegistry() error {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: registry.New(registry.Logger(log.New(io.Discard, "", 0))), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	n.registry = func() { _ = srv.Close() }
	n.Registry = l.Addr().String()
	hosts := filepath.Join(n.Dir, "containerd", "certs.d", n.Registry)
	if err := os.MkdirAll(hosts, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(hosts, "hosts.toml"), fmt.Appendf(nil, `server = "http://%[1]s"

[host."http://%[1]s"]
  capabilities = ["pull", "resolve"]
`, n.Registry), 0o600)
}

// stopContainers kills every container of the node's Pods, and waits
// until containerd has none left running: its CRI plugin deletes a task
// once it has exited; one it leaves is deleted here. So no shim outlives
// the test.
func (n *Node) stopContainers() {
	if n.containerd == nil || exited(n.containerd) {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tasks, err := n.tasks(ctx)
	if err != nil {
		return
	}
	for id := range tasks {
		_ = n.ctr(ctx, nil, "-n", "k8s.io", "tasks", "kill", "-s", "SIGKILL", id)
	}
	for len(tasks) > 0 && ctx.Err() == nil {
		time.Sleep(100 * time.Millisecond)
		if tasks, err = n.tasks(ctx); err != nil {
			return
		}
		for id, status := range tasks {
			if status == "STOPPED" {
				_ = n.ctr(ctx, nil, "-n", "k8s.io", "tasks", "delete", id)
			}
		}
	}
}

// tasks are containerd's tasks of the node's Pods, by ID, with their
// status (RUNNING, STOPPED, ...).
func (n *Node) tasks(ctx context.Context) (map[string]string, error) {
	var out bytes.Buffer
	if err := n.ctr(ctx, &out, "-n", "k8s.io", "tasks", "ls"); err != nil {
		return nil, err
	}
	tasks := map[string]string{}
	for _, line := range strings.Split(out.String(), "\n")[1:] {
		if fields := strings.Fields(line); len(fields) >= 3 {
			tasks[fields[0]] = fields[2]
		}
	}
	return tasks, nil
}

// killShims kills the containerd shims of the node's containerd that are
// left: those whose command line names its socket.
func (n *Node) killShims() {
	if n.socket != "" {
		killShimsNaming(n.socket)
	}
}

// killShimsNaming kills the containerd shims whose command line holds
// address (their containerd's socket, or the start of its path), and
// tells how many.
func killShimsNaming(address string) int {
	killed := 0
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(b, []byte("containerd-shim")) || !bytes.Contains(b, []byte(address)) {
			continue
		}
		var pid int
		if _, err := fmt.Sscanf(p, "/proc/%d/cmdline", &pid); err == nil && syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed++
		}
	}
	return killed
}

// ContainerPID is the host PID of a container's process, by the ID the
// Pod's status gives ("containerd://<id>"), as containerd reports it.
func (n *Node) ContainerPID(ctx context.Context, containerID string) (int, error) {
	id := strings.TrimPrefix(containerID, "containerd://")
	var out bytes.Buffer
	if err := n.ctr(ctx, &out, "-n", "k8s.io", "tasks", "ls"); err != nil {
		return 0, err
	}
	for _, line := range strings.Split(out.String(), "\n") {
		fields := strings.Fields(line)
		if len(fields) >= 3 && fields[0] == id && fields[2] == "RUNNING" {
			return strconv.Atoi(fields[1])
		}
	}
	return 0, fmt.Errorf("no running task %s in containerd:\n%s", id, out.String())
}
