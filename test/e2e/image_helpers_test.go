package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kargo-latch/kargo-latch/hack/image/ociimage"
)

// The operators the Helm tests install run from the image's own binary,
// not from `go build`: the image `make image` wrote (the layout
// $KARGO_LATCH_IMAGE names), or one built at first use, whose binary for
// this machine's platform is extracted and run as a container of the
// chart's Deployment runs it (no kubelet runs Pods here). The image must
// be the work tree's: a layout left from another commit, or from before
// the last change, fails the tests rather than stand in for the tree.

var imageOperator struct {
	once sync.Once
	// name is the image's name, as containerd and Docker know it.
	name string
	// path is the extracted binary; sha256 that of /kargo-latch in the
	// image's layer.
	path, sha256 string
	err          error
	cleanup      []func()
}

// imageOperatorPath extracts the image's binary, once per test run, after
// checking that the image is what the work tree builds.
func imageOperatorPath() (string, error) {
	op := &imageOperator
	op.once.Do(func() {
		op.err = extractImageOperator(context.Background())
	})
	return imageOperator.path, imageOperator.err
}

func extractImageOperator(ctx context.Context) error {
	op := &imageOperator
	layout, cleanup, err := ociimage.LayoutForTests(ctx, env.cluster.Root)
	if err != nil {
		return err
	}
	op.cleanup = append(op.cleanup, cleanup)
	if op.sha256, err = ociimage.CheckLayoutIsTree(ctx, env.cluster.Root, layout); err != nil {
		return err
	}
	_, entry, err := ociimage.ReadLayout(layout)
	if err != nil {
		return err
	}
	op.name = entry.Annotations["io.containerd.image.name"]
	dir, err := os.MkdirTemp("", "kargo-latch-image-bin-")
	if err != nil {
		return err
	}
	op.cleanup = append(op.cleanup, func() { _ = os.RemoveAll(dir) })
	// The image's user runs it.
	if err := os.Chmod(dir, 0o755); err != nil { //nolint:gosec // the binary is public
		return err
	}
	op.path, err = ociimage.ExtractBinary(layout, dir)
	return err
}

// removeImageOperator removes what imageOperatorPath made.
func removeImageOperator() {
	for _, f := range imageOperator.cleanup {
		f()
	}
}

// runFromImage makes p run as the container c of a Deployment the chart
// rendered: the binary of the image c names, as its entrypoint (c has no
// command of its own), with p's args (the test passes c's), and as a
// container runtime runs it: with c's environment and HOME=/nonexistent
// (the image's user's home) and nothing else, in /, and, when the tests
// run as root, as the image's user (65532), which can read only the
// kubeconfig that stands for the Pod's ServiceAccount. Where that user
// cannot run here (a user namespace that does not map it, a TMPDIR it may
// not enter), the tests' own user runs it, and the test logs why. Once started, p is
// checked to be running that binary: /proc/<pid>/exe is the extracted
// file, with the sha256 of /kargo-latch in the image's layer.
func runFromImage(t *testing.T, p *process, ns string, c corev1.Container) {
	t.Helper()
	_, err := imageOperatorPath()
	must(t, err)
	want, err := ociimage.FullName(c.Image)
	must(t, err)
	if want != imageOperator.name {
		t.Fatalf("the Deployment's container runs the image %s; the image under test is %s", c.Image, imageOperator.name)
	}
	if len(c.Command) > 0 {
		t.Fatalf("the Deployment's container overrides the image's entrypoint with %v", c.Command)
	}
	p.env = []string{}
	values := map[string]string{}
	for _, e := range c.Env {
		value := e.Value
		if e.ValueFrom != nil {
			value = configMapValue(t, ns, e)
		}
		values[e.Name] = value
		p.env = append(p.env, fmt.Sprintf("%s=%s", e.Name, value))
	}
	// The kubelet expands $(NAME) in args with the container's variables.
	for i, a := range p.args {
		for name, value := range values {
			a = strings.ReplaceAll(a, "$("+name+")", value)
		}
		if strings.Contains(a, "$(") {
			t.Fatalf("the argument %q names a variable the container does not set", p.args[i])
		}
		p.args[i] = a
	}
	p.env = append(p.env, "HOME=/nonexistent")
	p.dir = "/"
	uid := os.Geteuid()
	if uid == 0 && imageUserRuns(t) {
		uid = ociimage.NonrootID
		p.cred = &syscall.Credential{Uid: ociimage.NonrootID, Gid: ociimage.NonrootID}
		at := slices.Index(p.args, "--kubeconfig")
		if at < 0 || at+1 >= len(p.args) {
			t.Fatalf("the process has no --kubeconfig: %v", p.args)
		}
		p.args[at+1] = kubeconfigOf(t, p.args[at+1], ociimage.NonrootID)
	}
	p.binary = imageOperatorPath
	p.verify = func(pid int) error { return runsImageBinary(pid, uid, p.env) }
}

// configMapValue resolves a container variable from a ConfigMap of ns as the
// kubelet does; any other valueFrom fails the test.
func configMapValue(t *testing.T, ns string, e corev1.EnvVar) string {
	t.Helper()
	ref := e.ValueFrom.ConfigMapKeyRef
	if ref == nil {
		t.Fatalf("the container's variable %s has a valueFrom other than a configMapKeyRef, which this test cannot resolve", e.Name)
	}
	cm, err := env.kube.CoreV1().ConfigMaps(ns).Get(ctx, ref.Name, metav1.GetOptions{})
	must(t, err)
	value, ok := cm.Data[ref.Key]
	if !ok {
		t.Fatalf("the container's variable %s names the key %s, which the ConfigMap %s lacks", e.Name, ref.Key, ref.Name)
	}
	return value
}

// runsImageBinary checks that the process pid runs the image's binary,
// as uid, in /, with the environment env and no other.
func runsImageBinary(pid, uid int, env []string) error {
	proc := fmt.Sprintf("/proc/%d", pid)
	cwd, err := os.Readlink(proc + "/cwd")
	if err != nil {
		return err
	}
	if cwd != "/" {
		return fmt.Errorf("the operator runs in %s, want /", cwd)
	}
	// The parent returns from exec before the kernel has laid out the new
	// program's environment (the exec pipe closes first), and until then
	// /proc/<pid>/environ reads empty: read it until the layout is done.
	var environ []byte
	for deadline := time.Now().Add(5 * time.Second); len(environ) == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if environ, err = os.ReadFile(proc + "/environ"); err != nil {
			return err
		}
	}
	if got := strings.Split(strings.TrimSuffix(string(environ), "\x00"), "\x00"); !slices.Equal(got, env) {
		return fmt.Errorf("the operator's environment is %q, want %q", got, env)
	}
	exe, err := os.Readlink(proc + "/exe")
	if err != nil {
		return err
	}
	if exe != imageOperator.path {
		return fmt.Errorf("the operator runs %s, not the image's binary %s", exe, imageOperator.path)
	}
	sum, err := ociimage.FileSHA256(proc + "/exe")
	if err != nil {
		return err
	}
	if sum != imageOperator.sha256 {
		return fmt.Errorf("the operator runs a binary of sha256 %s; the image's /kargo-latch has %s", sum, imageOperator.sha256)
	}
	fi, err := os.Stat(proc)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fmt.Errorf("%s: no owner", proc)
	}
	if int(st.Uid) != uid {
		return fmt.Errorf("the operator runs as the user %d, want %d", st.Uid, uid)
	}
	return nil
}

// imageUser is whether the image's user can run the operator here: the
// answer of probeImageUser, asked once per test run.
var imageUser struct {
	once sync.Once
	err  error
}

// imageUserRuns tells whether runFromImage, when the tests run as root,
// runs the operator as the image's user; it logs why not when not.
func imageUserRuns(t *testing.T) bool {
	t.Helper()
	imageUser.once.Do(func() {
		imageUser.err = probeImageUser(imageOperator.path, "")
	})
	if imageUser.err != nil {
		t.Logf("the operator runs as the tests' user %d, not as the image's user %d: %v", os.Geteuid(), ociimage.NonrootID, imageUser.err)
		return false
	}
	return true
}

// probeImageUser checks that the image's user can do what runFromImage
// asks of it: run binary, and read a file only it may read in a directory
// made in tmp ("": $TMPDIR), as kubeconfigOf makes. A container whose
// user namespace does not map that user, or whose TMPDIR is under a
// directory only root may enter, cannot.
func probeImageUser(binary, tmp string) error {
	dir, err := os.MkdirTemp(tmp, "kargo-latch-user-probe-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(dir) }()
	file := filepath.Join(dir, "probe")
	if err := os.WriteFile(file, []byte("readable"), 0o600); err != nil {
		return err
	}
	for _, path := range []string{file, dir} {
		if err := os.Chown(path, ociimage.NonrootID, ociimage.NonrootID); err != nil {
			return err
		}
	}
	cat, err := exec.LookPath("cat")
	if err != nil {
		return err
	}
	for _, args := range [][]string{{binary, "version"}, {cat, file}} {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = "/"
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: ociimage.NonrootID, Gid: ociimage.NonrootID}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s as the user %d: %w: %s", strings.Join(args, " "), ociimage.NonrootID, err, out)
		}
		if args[0] == cat && string(out) != "readable" {
			return fmt.Errorf("%s as the user %d read %q", strings.Join(args, " "), ociimage.NonrootID, out)
		}
	}
	return nil
}

// kubeconfigOf is a copy of the kubeconfig at path that only uid reads.
func kubeconfigOf(t *testing.T, path string, uid int) string {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	dir, err := os.MkdirTemp("", "kargo-latch-kubeconfig-")
	must(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	copied := filepath.Join(dir, "kubeconfig")
	must(t, os.WriteFile(copied, b, 0o600)) //nolint:gosec // copied is in a directory made here
	must(t, os.Chown(copied, uid, uid))
	must(t, os.Chown(dir, uid, uid))
	return copied
}
