package imagetest

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// hackImage is `go run ./hack/image args…` of the tree under test, with
// env added to the test's environment.
func hackImage(env []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(context.Background(), "go", append([]string{"run", "./hack/image"}, args...)...)
	cmd.Dir = built.root
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// withUmask makes cmd run with the umask mask (a shell's umask argument).
func withUmask(cmd *exec.Cmd, mask string) *exec.Cmd {
	sh, err := exec.LookPath("sh")
	if err != nil {
		panic(err)
	}
	cmd.Args = append([]string{"sh", "-c", `umask ` + mask + ` && exec "$@"`, "sh"}, cmd.Args...)
	cmd.Path = sh
	return cmd
}

// succeed runs cmd and returns its output, failing the test if it fails.
func succeed(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	return string(out)
}

// refused runs cmd, which must fail saying want.
func refused(t *testing.T, cmd *exec.Cmd, want string) {
	t.Helper()
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), want) {
		t.Errorf("%s: %v, want a refusal that says %q:\n%s", strings.Join(cmd.Args, " "), err, want, out)
	}
}

// checkout is a new checkout of HEAD (git worktree add), made with the
// umask mask, and removed with the test: the commit alone, whatever the
// work tree under test holds besides.
func checkout(t *testing.T, mask string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "checkout")
	succeed(t, withUmask(exec.Command("git", "-C", built.root, "worktree", "add", "--detach", "--quiet", dir, "HEAD"), mask))
	t.Cleanup(func() {
		out, err := exec.Command("git", "-C", built.root, "worktree", "remove", "--force", dir).CombinedOutput()
		if err != nil {
			t.Logf("git worktree remove %s: %v\n%s", dir, err, out)
			_ = os.RemoveAll(dir)
			_ = exec.Command("git", "-C", built.root, "worktree", "prune").Run()
		}
	})
	return dir
}
