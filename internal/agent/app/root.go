// Package app assembles the offload-agent command tree: the in-cluster
// components kubectl-offload deploys.
package app

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/kubectl-offload/kubectl-offload/internal/cli/exit"
	"github.com/kubectl-offload/kubectl-offload/internal/version"
)

// NewRootCmd returns the offload-agent root command.
func NewRootCmd(out, errOut io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "offload-agent",
		Short:         "The in-cluster agent of kubectl-offload",
		Long:          "offload-agent runs the in-cluster components of kubectl-offload. The chart starts one Deployment per subcommand.",
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetOut(out)
	root.SetErr(errOut)
	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the agent version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), version.Get())
			return err
		},
	})
	for _, c := range []struct{ use, short string }{
		{"controller-manager", "Run the controllers, the webhook and the virtual kubelets"},
		{"auth", "Run the peering authentication service"},
		{"gateway", "Run the WireGuard network gateway"},
	} {
		root.AddCommand(&cobra.Command{
			Use:   c.use,
			Short: c.short,
			Args:  cobra.NoArgs,
			RunE: func(cmd *cobra.Command, _ []string) error {
				return fmt.Errorf("%s is not part of this build yet", cmd.Name())
			},
		})
	}
	return root
}

// Run executes the agent command line and returns the process exit code.
func Run(ctx context.Context, out, errOut io.Writer, args []string) int {
	root := NewRootCmd(out, errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err != nil {
		fmt.Fprintf(errOut, "Error: %v\n", err)
	}
	return exit.Code(err)
}
