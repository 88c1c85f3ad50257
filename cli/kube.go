package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kargo-latch/kargo-latch/kargo"
)

// kubeFlags are kubectl's connection flags, as client-go defines them for
// kubectl (clientcmd.RecommendedConfigOverrideFlags, which
// k8s.io/cli-runtime's ConfigFlags also fills): --kubeconfig, --context,
// --namespace/-n, --as, --as-group, --as-uid, --server/-s, --token,
// --cluster, --user, the TLS flags and --request-timeout, with kubectl's
// meaning (the kubeconfig from --kubeconfig, else $KUBECONFIG, else
// ~/.kube/config; the namespace defaults to the context's).
//
// Not cli-runtime's ConfigFlags itself: its package brings kustomize and
// kubectl's printers along, which made this binary (the operator's too) 32
// MB bigger and every process, the operator included, start with 25 MB more
// resident memory, for the same flags.
type kubeFlags struct {
	kubeconfig string
	overrides  clientcmd.ConfigOverrides
	userAgent  string
	// qps and burst, when set, replace client-go's defaults (5 and 10):
	// the dashboard starts four watches and asks two reviews per project.
	qps   float32
	burst int
}

func newKubeFlags(p Program) *kubeFlags {
	return &kubeFlags{userAgent: p.Name + "/" + p.Version}
}

func (k *kubeFlags) addFlags(root *cobra.Command) {
	flags := root.PersistentFlags()
	flags.StringVar(&k.kubeconfig, clientcmd.RecommendedConfigPathFlag, "", "Path to the kubeconfig file to use for CLI requests.")
	names := clientcmd.RecommendedConfigOverrideFlags("")
	names.ClusterOverrideFlags.APIServer.ShortName = "s" // as kubectl
	// kubectl hides basic authentication, deprecated; so does this.
	names.AuthOverrideFlags.Username.LongName, names.AuthOverrideFlags.Password.LongName = "", ""
	clientcmd.BindOverrideFlags(&k.overrides, flags, names)
	_ = root.RegisterFlagCompletionFunc(clientcmd.FlagNamespace, k.completeProjects)
}

// client connects as kubectl would, and returns the namespace to use.
func (k *kubeFlags) client() (dynamic.Interface, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = k.kubeconfig
	loader := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &k.overrides)
	cfg, err := loader.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("loading the kubeconfig: %w", err)
	}
	cfg.UserAgent = k.userAgent
	if k.qps > 0 {
		cfg.QPS, cfg.Burst = k.qps, k.burst
	}
	if cfg.Timeout == 0 { // no --request-timeout: bound the wait for an answer
		cfg.Wrap(boundResponses(responseTimeout))
	}
	ns, _, err := loader.Namespace()
	if err != nil {
		return nil, "", err
	}
	client, err := dynamic.NewForConfig(cfg)
	return client, ns, err
}

// completionTimeout bounds the API calls of shell completion: a shell
// waiting for a TAB must not hang on an unreachable cluster.
const completionTimeout = 5 * time.Second

// completeStages completes a STAGE argument with the Stages of the project.
func (k *kubeFlags) completeStages(cmd *cobra.Command, args []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	client, ns, err := k.client()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return completeNames(cmd.Context(), prefix, func(ctx context.Context) ([]string, error) {
		return listNames(ctx, client.Resource(kargo.StagesResource).Namespace(ns))
	})
}

// completeProjects completes -n with Kargo's Projects, or the namespaces
// when Projects may not be listed.
func (k *kubeFlags) completeProjects(cmd *cobra.Command, _ []string, prefix string) ([]cobra.Completion, cobra.ShellCompDirective) {
	client, _, err := k.client()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return completeNames(cmd.Context(), prefix, func(ctx context.Context) ([]string, error) {
		names, err := listNames(ctx, client.Resource(kargo.GroupVersion.WithResource("projects")))
		if err != nil {
			names, err = listNames(ctx, client.Resource(metav1.SchemeGroupVersion.WithResource("namespaces")))
		}
		return names, err
	})
}

// completeNames offers the names list returns that start with prefix.
func completeNames(ctx context.Context, prefix string, list func(context.Context) ([]string, error)) ([]cobra.Completion, cobra.ShellCompDirective) {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, completionTimeout)
	defer cancel()
	names, err := list(ctx)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

func listNames(ctx context.Context, r dynamic.ResourceInterface) ([]string, error) {
	l, err := r.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	names := make([]string, len(l.Items))
	for i, u := range l.Items {
		names[i] = u.GetName()
	}
	return names, nil
}

// fixedCompletions completes a flag with a fixed set of values.
func fixedCompletions(values ...string) cobra.CompletionFunc {
	return cobra.FixedCompletions(values, cobra.ShellCompDirectiveNoFileComp)
}

// explain turns API errors into what a person should do about them.
func explain(err error, verb, ns, role string) error {
	switch {
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy"):
		return fmt.Errorf("forbidden by policy: %s", apiMessage(err))
	case apierrors.IsForbidden(err):
		return fmt.Errorf("forbidden: this needs %q on stagepauses.kargo-latch.io in namespace %s (ClusterRole %s, bound in that namespace): %s",
			verb, ns, role, apiMessage(err))
	}
	return err
}

func apiMessage(err error) string {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return status.Status().Message
	}
	return err.Error()
}
