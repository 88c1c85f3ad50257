// Package cli is kargo-latch's command line for people and pipelines:
// status (and status -w), pause, resume, wait and version, with shell
// completion. It ships in the operator's binary and works as a kubectl
// plugin when the binary is named kubectl-latch.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// Exit codes, for pipelines to branch on; wait's help explains them.
const (
	// ExitOK: done; for wait, the condition was reached.
	ExitOK = 0
	// ExitFailed: the command failed, with the reason on stderr; for wait,
	// the cycle it waited for failed (or the Stage was deleted), or the
	// API server refused or could not be reached.
	ExitFailed = 1
	// ExitUsage: the command line is wrong (unknown command or flag, a
	// missing or extra argument, a bad value); nothing was done.
	ExitUsage = 2
	// ExitTimeout: wait's --timeout passed before the condition was reached
	// or failed.
	ExitTimeout = 3
	// ExitHeld: wait --for=resumed found no StagePause covering the Stage,
	// but Kargo's own auto-promotion hold (Kargo v1.11.1+) still stops
	// auto-promotion from at least one origin. Only a person releases such
	// a hold, so the wait ends at once rather than hang the pipeline.
	ExitHeld = 4
	// ExitAnalysisFailed: wait --for=verified found that the cycle's
	// configured verification (an Argo Rollouts analysis, Kargo's own or
	// kargo-latch's verify-on-latch run) ended Failed, Error or
	// Inconclusive: the Freight will not be verified in this cycle.
	ExitAnalysisFailed = 5
	// ExitInterrupted: wait was interrupted (SIGINT, SIGTERM) first, as a
	// shell reports a process ended by SIGINT.
	ExitInterrupted = 130
)

// Commands lists the subcommands, so that main can tell a CLI call from the
// operator's own flags. Shell completion scripts call the hidden
// __complete commands.
var Commands = []string{
	"status", "pause", "resume", "wait", "dashboard", "version", "completion", "help",
	cobra.ShellCompRequestCmd, cobra.ShellCompNoDescRequestCmd,
}

// Program is the CLI as one binary presents it.
type Program struct {
	// Name is the binary's name: "kargo-latch", or "kubectl-latch" for the
	// kubectl plugin, whose help then says "kubectl latch".
	Name string
	// Version is the build's version (main.version, set by -ldflags).
	Version string
}

// Run runs one command as the binary kargo-latch of an unknown version and
// returns the process exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return Program{}.Run(ctx, args, stdout, stderr)
}

// Run runs one command and returns the process exit code.
func (p Program) Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root, started := p.root(stdout, stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	code := exitCode(err, *started)
	fmt.Fprintln(stderr, "error:", err)
	if code == ExitUsage && cmd != nil {
		fmt.Fprintf(stderr, "See '%s --help'.\n", cmd.CommandPath())
	}
	return code
}

const rootHelp = `kargo-latch shows and steers the latch cycles of Kargo Stages: whether each
promotion's Stage was seen Healthy (latched), whether it failed, and the
StagePauses that stop auto-promotion.

As a kubectl plugin (the binary named kubectl-latch on the PATH), every
command is also "kubectl latch ...".`

const rootExamples = `  kargo-latch status -n PROJECT -w
  kargo-latch wait prod -n PROJECT --for=latched --timeout 10m
  kargo-latch pause prod -n PROJECT --reason Incident --message "INC-1234"
  kargo-latch resume prod -n PROJECT
  kargo-latch completion bash > /etc/bash_completion.d/kargo-latch`

// root builds the command tree. started reports, once it has run, whether
// a command's own work began: an error before that is a usage error.
func (p Program) root(stdout, stderr io.Writer) (*cobra.Command, *bool) {
	p = p.withDefaults()
	started := new(bool)
	root := &cobra.Command{
		Use:           p.Name,
		Short:         "Show and steer kargo-latch's latch cycles and pauses of Kargo Stages",
		Long:          rootHelp,
		Example:       rootExamples,
		SilenceErrors: true,
		SilenceUsage:  true,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usageErrorf("unknown command %q for %q", args[0], cmd.CommandPath())
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
		PersistentPreRun: func(*cobra.Command, []string) {
			*started = true
		},
	}
	if p.Name == "kubectl-latch" {
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl latch"}
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &exitError{code: ExitUsage, err: err} })
	kube := newKubeFlags(p)
	kube.addFlags(root)
	root.AddCommand(statusCmd(kube), pauseCmd(kube), resumeCmd(kube), waitCmd(kube), dashboardCmd(kube), versionCmd(p))
	return root, started
}

func (p Program) withDefaults() Program {
	if p.Name == "" {
		p.Name = "kargo-latch"
	}
	if p.Version == "" {
		p.Version = "dev"
	}
	return p
}

// exitError carries an exit code other than ExitFailed.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, args...)}
}

// exitCode maps an error to the exit code: its own, else a usage error if
// the command's work had not begun (cobra refused the command line), else
// ExitFailed.
func exitCode(err error, started bool) int {
	var coded *exitError
	switch {
	case errors.As(err, &coded):
		return coded.code
	case !started:
		return ExitUsage
	}
	return ExitFailed
}
