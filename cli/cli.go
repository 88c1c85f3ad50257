// Package cli is kargo-latch's command line for people: status, pause and
// resume. It ships in the operator's binary and works as a kubectl plugin
// when the binary is named kubectl-latch.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
)

// Commands lists the subcommands, so that main can tell a CLI call from the
// operator's own flags.
var Commands = []string{"status", "pause", "resume"}

const usage = `Usage:
  kargo-latch status [STAGE] [-n PROJECT | -A] [-o table|json|yaml]
  kargo-latch pause STAGE -n PROJECT [--reason REASON] [--message TEXT]
  kargo-latch pause --all -n PROJECT [--reason REASON] [--message TEXT]
  kargo-latch resume STAGE -n PROJECT
  kargo-latch resume --all -n PROJECT

Flags for every command: --kubeconfig PATH, --context NAME.
As a kubectl plugin (binary named kubectl-latch): kubectl latch status -n PROJECT
`

// Run runs one command and returns the process exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stdout, usage)
		return 0
	}
	var err error
	switch args[0] {
	case "status":
		err = status(ctx, args[1:], stdout)
	case "pause":
		err = pause(ctx, args[1:], stdout)
	case "resume":
		err = resume(ctx, args[1:], stdout)
	default:
		err = fmt.Errorf("unknown command %q\n\n%s", args[0], usage)
	}
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(stdout, usage)
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "error:", err)
		return 1
	}
	return 0
}

// common are the flags every command takes.
type common struct {
	kubeconfig, kubeContext, namespace string
	fs                                 *flag.FlagSet
}

func newFlags(name string) *common {
	c := &common{fs: flag.NewFlagSet(name, flag.ContinueOnError)}
	c.fs.SetOutput(io.Discard)
	c.fs.StringVar(&c.kubeconfig, "kubeconfig", "", "path to the kubeconfig")
	c.fs.StringVar(&c.kubeContext, "context", "", "kubeconfig context")
	c.fs.StringVar(&c.namespace, "namespace", "", "the Kargo project (namespace)")
	c.fs.StringVar(&c.namespace, "n", "", "the Kargo project (namespace)")
	return c
}

// parse parses flags anywhere among the arguments, as kubectl does, and
// returns the positional arguments.
func (c *common) parse(args []string) ([]string, error) {
	var positional []string
	for {
		if err := c.fs.Parse(args); err != nil {
			return nil, err
		}
		if c.fs.NArg() == 0 {
			return positional, nil
		}
		positional = append(positional, c.fs.Arg(0))
		args = c.fs.Args()[1:]
	}
}

// client connects as kubectl would: --kubeconfig, else $KUBECONFIG, else
// ~/.kube/config; the namespace defaults to the context's.
func (c *common) client() (dynamic.Interface, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = c.kubeconfig
	overrides := &clientcmd.ConfigOverrides{CurrentContext: c.kubeContext}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, "", fmt.Errorf("loading the kubeconfig: %w", err)
	}
	ns := c.namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, "", err
		}
	}
	client, err := dynamic.NewForConfig(cfg)
	return client, ns, err
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
