// Package cluster starts a real kube-apiserver and etcd on loopback for
// tests and the demo, and installs Kargo's CRDs into it.
//
// The binaries are built from Go modules by `make cluster` into bin/ at the
// repository root (see test/tools). Each Cluster uses free ports and its own
// temporary directory, so test packages can run in parallel.
package cluster

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
)

// Cluster is a running etcd and kube-apiserver.
type Cluster struct {
	// Config reaches the apiserver as an admin.
	Config *rest.Config
	// Dir holds the cluster's data, keys and logs.
	Dir string
	// Root is the repository root the binaries came from.
	Root string
	// CRDSource says which CRDs were installed: Kargo's real ones or the
	// project's stand-ins (test/crds).
	CRDSource string
	// RealKargoCRDs tells whether they were Kargo's real ones.
	RealKargoCRDs bool

	etcd, apiserver, controllerManager *exec.Cmd
	apiserverArgs                      []string
}

// Options tune Start.
type Options struct {
	// Tokens are extra static users, one per line of the apiserver's token
	// file: token,user,uid,"group1,group2".
	Tokens []string
	// Log receives progress lines (e.g. for the demo); nil for none.
	Log func(format string, args ...any)
	// ControllerManager also runs kube-controller-manager with the
	// namespace and garbage-collector controllers, so deleting a namespace
	// empties it and ownerReferences are honoured, as in a real cluster.
	ControllerManager bool
	// APIServerArgs replace kube-apiserver's flags of the same names, or
	// add them; an empty value drops the flag (apiserverargs.go). The
	// node (node.go) binds the API server where its Pods reach it.
	APIServerArgs map[string]string
}

// Start runs etcd and kube-apiserver and waits until the apiserver is ready
// and the Kargo CRDs are established.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	say := opts.Log
	if say == nil {
		say = func(string, ...any) {}
	}
	root, err := RepoRoot()
	if err != nil {
		return nil, err
	}
	bins := []string{"etcd", "kube-apiserver"}
	if opts.ControllerManager {
		bins = append(bins, "kube-controller-manager")
	}
	for _, bin := range bins {
		if _, err := os.Stat(filepath.Join(root, "bin", bin)); err != nil {
			return nil, fmt.Errorf("bin/%s is missing: run `make cluster` first (it builds the test cluster from Go modules)", bin)
		}
	}
	dir, err := os.MkdirTemp("", "kargo-latch-cluster-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{Dir: dir, Root: root}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	ports, err := FreePorts(3)
	if err != nil {
		return nil, err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	say("starting etcd on %s", etcdURL)
	c.etcd, err = c.start("etcd",
		"--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "default="+peerURL,
		"--unsafe-no-fsync", "--log-level", "error",
	)
	if err != nil {
		return nil, err
	}
	if err := c.writeAuthFiles(opts.Tokens); err != nil {
		return nil, err
	}
	c.apiserverArgs = []string{
		"--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(ports[2]),
		"--cert-dir", filepath.Join(dir, "certs"),
		"--token-auth-file", filepath.Join(dir, "tokens.csv"),
		"--authorization-mode", "RBAC",
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", filepath.Join(dir, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(dir, "sa.key"),
		"--service-cluster-ip-range", "10.0.0.0/24",
		"--disable-admission-plugins", "ServiceAccount",
	}
	c.apiserverArgs = overrideArgs(c.apiserverArgs, opts.APIServerArgs)
	host := argValue(c.apiserverArgs, "--bind-address") + ":" + argValue(c.apiserverArgs, "--secure-port")
	say("starting kube-apiserver on https://%s", host)
	if c.apiserver, err = c.start("kube-apiserver", c.apiserverArgs...); err != nil {
		return nil, err
	}
	c.Config = &rest.Config{
		Host:            "https://" + host,
		BearerToken:     AdminToken,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true},
		QPS:             200,
		Burst:           400,
	}
	if err := c.waitReady(ctx); err != nil {
		return nil, err
	}
	say("apiserver ready; installing CRDs")
	if err := c.installCRDs(ctx); err != nil {
		return nil, err
	}
	say("CRDs established (%s)", c.CRDSource)
	if opts.ControllerManager {
		say("starting kube-controller-manager (namespace and garbage-collector controllers)")
		if err := c.startControllerManager(); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Stop kills the processes and removes the cluster's directory.
func (c *Cluster) Stop() {
	for _, p := range []*exec.Cmd{c.controllerManager, c.apiserver, c.etcd} {
		if p != nil && p.Process != nil {
			_ = p.Process.Kill()
			_ = p.Wait()
		}
	}
	if os.Getenv("KARGO_LATCH_KEEP_CLUSTER_DIR") == "" {
		_ = os.RemoveAll(c.Dir)
	}
}

// StopAPIServer kills kube-apiserver, leaving etcd and its data in place.
func (c *Cluster) StopAPIServer() {
	if c.apiserver != nil && c.apiserver.Process != nil {
		_ = c.apiserver.Process.Kill()
		_ = c.apiserver.Wait()
	}
}

// StartAPIServer starts kube-apiserver again, on the same port, etcd and
// keys, and waits until it is ready.
func (c *Cluster) StartAPIServer(ctx context.Context) error {
	var err error
	if c.apiserver, err = c.start("kube-apiserver", c.apiserverArgs...); err != nil {
		return err
	}
	return c.waitReady(ctx)
}

// UserConfig is a rest config for a static user given in Options.Tokens.
func (c *Cluster) UserConfig(token string) *rest.Config {
	cfg := rest.CopyConfig(c.Config)
	cfg.BearerToken = token
	return cfg
}

func (c *Cluster) start(name string, args ...string) (*exec.Cmd, error) {
	logFile, err := os.OpenFile(filepath.Join(c.Dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(c.Root, "bin", name), args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Die with the test process, whatever way it ends.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	return cmd, nil
}

func (c *Cluster) writeAuthFiles(tokens []string) error {
	lines := AdminToken + ",admin,admin,\"system:masters\"\n" +
		controllerManagerToken + "," + controllerManagerUser + "," + controllerManagerUser + ",\n"
	for _, t := range tokens {
		lines += t + "\n"
	}
	if err := os.WriteFile(filepath.Join(c.Dir, "tokens.csv"), []byte(lines), 0o600); err != nil {
		return err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.Dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.Dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}

func (c *Cluster) waitReady(ctx context.Context) error {
	client := &http.Client{
		Timeout:   2 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}, //nolint:gosec // a loopback test apiserver with a self-signed cert
	}
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if exited(c.apiserver) || exited(c.etcd) {
			return fmt.Errorf("the test cluster exited during start; see the logs in %s", c.Dir)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.Config.Host+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+AdminToken)
		if resp, err := client.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("kube-apiserver not ready after 90s; see %s", filepath.Join(c.Dir, "kube-apiserver.log"))
}

func exited(cmd *exec.Cmd) bool {
	if cmd == nil || cmd.Process == nil {
		return false
	}
	// Signal 0 checks the process still exists; a zombie still does, so
	// also look at its state file.
	if err := cmd.Process.Signal(syscall.Signal(0)); err != nil {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
	return err == nil && len(b) > 0 && containsState(b, 'Z')
}

func containsState(stat []byte, state byte) bool {
	// The state follows the closing parenthesis of the command name.
	for i := len(stat) - 1; i >= 0; i-- {
		if stat[i] == ')' && i+2 < len(stat) {
			return stat[i+2] == state
		}
	}
	return false
}

// FreePorts returns n free loopback ports.
func FreePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			_ = l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// RepoRoot finds the repository root: the nearest directory upwards that
// holds the operator's go.mod next to latch/.
func RepoRoot() (string, error) {
	if root := os.Getenv("KARGO_LATCH_ROOT"); root != "" {
		return root, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if fileExists(filepath.Join(dir, "go.mod")) && fileExists(filepath.Join(dir, "latch")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("cannot find the kargo-latch repository root above the working directory")
		}
		dir = parent
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }
