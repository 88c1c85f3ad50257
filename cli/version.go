package cli

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func versionCmd(p Program) *cobra.Command {
	var short bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print kargo-latch's version",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			if short {
				_, err := fmt.Fprintln(out, p.version())
				return err
			}
			_, err := fmt.Fprintf(out, "%s %s (%s, %s/%s)\n", p.Name, p.version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
	cmd.Flags().BoolVar(&short, "short", false, "print the version alone")
	return cmd
}

// version is the version set at build time; for a build without one, the
// module version `go install …@vX.Y.Z` records, else "dev".
func (p Program) version() string {
	if p.Version != "dev" {
		return p.Version
	}
	if info, ok := debug.ReadBuildInfo(); ok && info.Main.Version != "" && info.Main.Version != "(devel)" {
		return info.Main.Version
	}
	return p.Version
}

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) > 0 {
		return usageErrorf("%s takes no arguments", cmd.CommandPath())
	}
	return nil
}
