package cli

import (
	"context"
	"fmt"
	"io"
	"os/exec"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/kargo-latch/kargo-latch/cli/dashboard"
)

// The dashboard's client rate: with many projects it starts four watches
// and asks two access reviews in each.
const (
	dashboardQPS   = 50
	dashboardBurst = 100
)

type dashboardOptions struct {
	address string
	port    int
	open    bool
}

const dashboardHelp = `Serves a web page on the loopback address that shows, live, what
"kargo-latch status" shows for every project you may read (or only -n
PROJECT): each project's Stages as a pipeline, their latch, health, Freight,
analysis, pauses and Kargo's own holds. It pauses and resumes a Stage or a
whole project.

The page acts with your kubeconfig and context, as kubectl does: the API
server's RBAC and admission decide every action, so the page can never do
more than you could with kubectl. It asks the API server what you may do
and says why an action is not allowed. No credential reaches the browser;
the page answers only to its own address and refuses requests from other
origins. Stop it with Ctrl-C.

Kargo's own UI can link to a paused Stage's page here: see
"kargo-latch dashboard stage-link".`

func dashboardCmd(kube *kubeFlags) *cobra.Command {
	var o dashboardOptions
	cmd := &cobra.Command{
		Use:   "dashboard [-n PROJECT] [--port 3100] [--address 127.0.0.1] [--open]",
		Short: "Serve a local web page to see Stages live and pause or resume them",
		Long:  dashboardHelp,
		Example: `  kargo-latch dashboard
  kargo-latch dashboard -n PROJECT --open
  kubectl latch dashboard --context prod`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), kube, cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&o.address, "address", "127.0.0.1", "the loopback address to listen on (127.0.0.1 or ::1)")
	cmd.Flags().IntVar(&o.port, "port", dashboard.DefaultPort, "the port to listen on (0: any free port)")
	cmd.Flags().BoolVar(&o.open, "open", false, "open the page in a browser")
	cmd.AddCommand(stageLinkCmd())
	return cmd
}

func (o *dashboardOptions) run(ctx context.Context, kube *kubeFlags, out io.Writer) error {
	if o.port < 0 || o.port > 65535 {
		return usageErrorf("--port %d is not a port", o.port)
	}
	kube.qps, kube.burst = dashboardQPS, dashboardBurst
	client, ns, err := kube.client()
	if err != nil {
		return err
	}
	only := ""
	if kube.overrides.Context.Namespace != "" { // -n given: that project alone
		only = ns
	}
	f := &feed{client: client, only: only, fallback: ns}
	return dashboard.Serve(ctx, dashboard.Options{
		Address: o.address,
		Port:    o.port,
		Watch:   f.watch,
		Act:     &actor{client: client},
		Ready: func(url string) {
			fmt.Fprintf(out, "%s%s (acting as your kubeconfig's user; Ctrl-C stops it)\n", dashboard.ServingPrefix, url)
			if o.open {
				openBrowser(url, out)
			}
		},
	})
}

// openBrowser opens url with the desktop's opener, best effort.
func openBrowser(url string, out io.Writer) {
	name, args := "xdg-open", []string{url}
	switch runtime.GOOS {
	case "darwin":
		name = "open"
	case "windows":
		name, args = "rundll32", []string{"url.dll,FileProtocolHandler", url}
	}
	if err := exec.Command(name, args...).Start(); err != nil {
		fmt.Fprintf(out, "cannot open a browser (%v): open the address above yourself\n", err)
	}
}
