package e2enode

import (
	"bufio"
	"context"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kargo-latch/kargo-latch/hack/image/ociimage"
	"github.com/kargo-latch/kargo-latch/latch"
)

// TestInstallRunsPodsOfThePushedImage: the README's `helm install` (2
// replicas) gives two Pods, Running and Ready (so the probes reach the
// ports the chart names), of the image pulled from the registry: each
// runs the image's /kargo-latch, as 65532, on a read-only root with no
// shell, within the chart's memory limit, configured in-cluster (the
// `kubernetes` Service's address, the projected token). The Lease's holder
// is one of the two Pods.
func TestInstallRunsPodsOfThePushedImage(t *testing.T) {
	ctx := context.Background()
	must(t, env.waitDeployment(ctx, time.Minute))
	d, err := env.kube.AppsV1().Deployments(releaseNS).Get(ctx, release, metav1.GetOptions{})
	must(t, err)
	if *d.Spec.Replicas != 2 {
		t.Errorf("the chart's Deployment has %d replicas, want 2", *d.Spec.Replicas)
	}
	idx, _, err := ociimage.ReadLayout(env.layout)
	must(t, err)
	digest, err := idx.Digest()
	must(t, err)
	svc, err := env.kube.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
	must(t, err)
	limit := d.Spec.Template.Spec.Containers[0].Resources.Limits.Memory().Value()
	pods, err := env.pods(ctx)
	must(t, err)
	var names []string
	for _, p := range pods {
		names = append(names, p.Name)
		t.Run(p.Name, func(t *testing.T) {
			c := p.Status.ContainerStatuses[0]
			if want := env.repository + ":" + env.tag; c.Image != want {
				t.Errorf("the container runs the image %s, want %s", c.Image, want)
			}
			if want := env.repository + "@" + digest.String(); c.ImageID != want {
				t.Errorf("the container's image is %s, want the pushed %s", c.ImageID, want)
			}
			pid := env.containerPID(t, p.Name)
			proc := "/proc/" + strconv.Itoa(pid)
			sum, err := ociimage.FileSHA256(proc + "/exe")
			must(t, err)
			if sum != env.binarySHA {
				t.Errorf("the process runs a binary of sha256 %s, want the image's /kargo-latch %s", sum, env.binarySHA)
			}
			for _, key := range []string{"Uid:", "Gid:"} {
				if ids := statusField(t, proc, key); !slices.Equal(ids, []string{"65532", "65532", "65532", "65532"}) {
					t.Errorf("the process's %s %v, want 65532 (the image's user)", key, ids)
				}
			}
			if opts := rootMountOptions(t, proc); !slices.Contains(opts, "ro") {
				t.Errorf("the container's root is mounted %v, want read-only", opts)
			}
			if _, err := os.Lstat(proc + "/root/bin/sh"); err == nil {
				t.Error("the container has /bin/sh")
			}
			if _, err := os.Stat(proc + "/root/var/run/secrets/kubernetes.io/serviceaccount/token"); err != nil {
				t.Errorf("the ServiceAccount token is not mounted: %v", err)
			}
			environ := environment(t, proc)
			if environ["KUBERNETES_SERVICE_HOST"] != svc.Spec.ClusterIP || environ["KUBERNETES_SERVICE_PORT"] != "443" {
				t.Errorf("the process reaches the API server at %s:%s, want the kubernetes Service %s:443",
					environ["KUBERNETES_SERVICE_HOST"], environ["KUBERNETES_SERVICE_PORT"], svc.Spec.ClusterIP)
			}
			if got := memoryLimit(t, proc); got != limit {
				t.Errorf("the container's memory cgroup allows %d bytes, want the chart's limit %d", got, limit)
			}
		})
	}
	leader, err := env.leader(ctx)
	must(t, err)
	if !slices.Contains(names, leader) {
		t.Errorf("the Lease's holder is %q, not one of the Pods %v", leader, names)
	}
}

// TestLatchThenFailurePauses: the seed's story, with the operator running
// only as the Deployment's Pods: a promotion latches, the next one fails,
// and the Stage is paused, by one StagePause.
func TestLatchThenFailurePauses(t *testing.T) {
	project := env.newProject(t)
	prod := env.createStage(t, project, "prod")
	promoteAndLatch(t, prod)
	fail(t, prod)
	waitPaused(t, prod, true, waitLimit)
	if got := env.pauses(t, prod); len(got) != 1 {
		t.Fatalf("StagePauses %v after one failure, want 1", got)
	}
	r, err := record(prod)
	must(t, err)
	if r.Phase != latch.PhaseFailed {
		t.Errorf("the Stage's record is %s after the failure, want %s", r.Phase, latch.PhaseFailed)
	}
}

// TestLogsShowTheOperatorsLines: the API server gets the leader Pod's log
// from the kubelet (`kubectl logs`): it became the leader, and it paused
// the Stage that failed, by the pause's name.
func TestLogsShowTheOperatorsLines(t *testing.T) {
	ctx := context.Background()
	project := env.newProject(t)
	stage := env.createStage(t, project, "logged")
	fail(t, stage)
	waitPaused(t, stage, true, waitLimit)
	pauses := env.pauses(t, stage)
	if len(pauses) != 1 {
		t.Fatalf("StagePauses %v after one failure, want 1", pauses)
	}
	leader, err := env.leader(ctx)
	must(t, err)
	var log string
	waitFor(t, "the leader's log to tell of the pause", waitLimit, func() (bool, error) {
		b, err := env.kube.CoreV1().Pods(releaseNS).GetLogs(leader, &corev1.PodLogOptions{}).DoRaw(ctx)
		log = string(b)
		return strings.Contains(log, "Paused the Stage after a failure") && strings.Contains(log, pauses[0]), err
	})
	if !strings.Contains(log, `"Became the leader"`) {
		t.Errorf("the leader's log does not say it became the leader:\n%s", log)
	}
}

// statusField is a line of /proc/<pid>/status, split.
func statusField(t *testing.T, proc, key string) []string {
	t.Helper()
	b, err := os.ReadFile(proc + "/status")
	must(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, key); ok {
			return strings.Fields(rest)
		}
	}
	t.Fatalf("%s/status has no %s", proc, key)
	return nil
}

// rootMountOptions are the options of the mount at / in the process's
// mount namespace.
func rootMountOptions(t *testing.T, proc string) []string {
	t.Helper()
	f, err := os.Open(proc + "/mountinfo")
	must(t, err)
	defer func() { _ = f.Close() }()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 5 && fields[4] == "/" {
			return strings.Split(fields[5], ",")
		}
	}
	t.Fatalf("%s/mountinfo has no mount at /", proc)
	return nil
}

func environment(t *testing.T, proc string) map[string]string {
	t.Helper()
	b, err := os.ReadFile(proc + "/environ")
	must(t, err)
	env := map[string]string{}
	for _, kv := range strings.Split(string(b), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	return env
}

// memoryLimit is the limit of the process's memory cgroup: v1's
// memory.limit_in_bytes in the memory hierarchy (as the kubelet's cgroupfs
// driver sets it on a v1 machine like this one), or v2's memory.max in the
// unified hierarchy (the "0::" line), where there is no v1 memory
// controller.
func memoryLimit(t *testing.T, proc string) int64 {
	t.Helper()
	b, err := os.ReadFile(proc + "/cgroup")
	must(t, err)
	unified := ""
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if slices.Contains(strings.Split(parts[1], ","), "memory") {
			return readCgroupLimit(t, cgroupMount(t, "cgroup", "memory"), parts[2], "memory.limit_in_bytes")
		}
		if parts[0] == "0" && parts[1] == "" {
			unified = parts[2]
		}
	}
	if unified != "" {
		return readCgroupLimit(t, cgroupMount(t, "cgroup2", ""), unified, "memory.max")
	}
	t.Fatalf("%s/cgroup has no memory controller:\n%s", proc, b)
	return 0
}

// readCgroupLimit reads a limit file of the cgroup path under mount ("max",
// v2's no limit, is the largest int64).
func readCgroupLimit(t *testing.T, mount, path, file string) int64 {
	t.Helper()
	v, err := os.ReadFile(filepath.Join(mount, filepath.Clean("/"+path), file)) //nolint:gosec // the container's cgroup, as the kernel names it
	must(t, err)
	text := strings.TrimSpace(string(v))
	if text == "max" {
		return math.MaxInt64
	}
	n, err := strconv.ParseInt(text, 10, 64)
	must(t, err)
	return n
}

// cgroupMount is where this machine mounts the cgroup hierarchy of the type
// ("cgroup" or "cgroup2") with the controller (v1) in its options.
func cgroupMount(t *testing.T, fsType, controller string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	must(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		// The fields after " - " are the filesystem type, the source and
		// the super options.
		fields := strings.Fields(line)
		sep := slices.Index(fields, "-")
		if sep < 5 || sep+3 >= len(fields) || fields[sep+1] != fsType {
			continue
		}
		if controller == "" || slices.Contains(strings.Split(fields[sep+3], ","), controller) {
			return fields[4]
		}
	}
	t.Fatalf("no %s hierarchy %s mounted here", fsType, controller)
	return ""
}
