package cluster

import (
	"context"
	"fmt"
	"os"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// ServiceAccountConfig gets a token for a ServiceAccount through the
// TokenRequest API, as a Pod would have it mounted, and returns a rest
// config that authenticates with it.
func (c *Cluster) ServiceAccountConfig(ctx context.Context, ns, name string) (*rest.Config, error) {
	seconds := int64(24 * 3600)
	kube, err := kubernetes.NewForConfig(c.Config)
	if err != nil {
		return nil, err
	}
	tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &seconds}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("token for ServiceAccount %s/%s: %w", ns, name, err)
	}
	return c.UserConfig(tr.Status.Token), nil
}

// WriteKubeconfig writes a kubeconfig for cfg's host and bearer token, with
// namespace as the context's default when not empty.
func WriteKubeconfig(path string, cfg *rest.Config, namespace string) error {
	ns := ""
	if namespace != "" {
		ns = fmt.Sprintf(", namespace: %q", namespace)
	}
	content := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: kargo-latch-test
  cluster: {server: %q, insecure-skip-tls-verify: true}
users:
- name: user
  user: {token: %q}
contexts:
- name: kargo-latch-test
  context: {cluster: kargo-latch-test, user: user%s}
current-context: kargo-latch-test
`, cfg.Host, cfg.BearerToken, ns)
	return os.WriteFile(path, []byte(content), 0o600)
}
