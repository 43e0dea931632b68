// Package app assembles the offload-agent command tree: the in-cluster
// components kubectl-offload deploys. It holds the cobra wiring only; each
// component's logic lives in its own package under internal/agent.
package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/manager"
	"github.com/kubectl-offload/kubectl-offload/internal/buildinfo"
	"github.com/kubectl-offload/kubectl-offload/internal/exit"
)

// NewRootCmd returns the offload-agent root command.
func NewRootCmd(out, errOut io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:   "offload-agent",
		Short: "The in-cluster agent of kubectl-offload",
		Long: `offload-agent runs the in-cluster components of kubectl-offload. The chart
starts one Deployment per subcommand.

In a pod it uses the pod's ServiceAccount; out of the cluster, for
debugging, pass --kubeconfig or set KUBECONFIG.`,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetOut(out)
	root.SetErr(errOut)
	g := &globalOptions{errOut: errOut}
	g.addFlags(root)

	root.AddCommand(&cobra.Command{
		Use:   "version",
		Short: "Print the agent version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			_, err := fmt.Fprintln(cmd.OutOrStdout(), buildinfo.Get())
			return err
		},
	})
	root.AddCommand(newCmdControllerManager(g), newCmdAuth(g), newCmdGateway(g), newCmdFabric(g))
	return root
}

// Run executes the agent command line and returns the process exit code.
// The components run until ctx is cancelled, which main does on SIGTERM.
func Run(ctx context.Context, out, errOut io.Writer, args []string) int {
	setMemoryLimit(os.Getenv)
	root := NewRootCmd(out, errOut)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if errors.Is(err, manager.ErrLeaderElectionLost) && ctx.Err() == nil {
		err = restartInPlace(errOut, err)
	}
	if err != nil {
		fmt.Fprintf(errOut, "Error: %v\n", err)
	}
	return exit.Code(err)
}

// globalOptions are the flags every component shares: where the API server
// is and how much to log.
type globalOptions struct {
	errOut    io.Writer
	verbosity int
}

func (g *globalOptions) addFlags(root *cobra.Command) {
	fs := root.PersistentFlags()
	// controller-runtime's config.GetConfig reads its own --kubeconfig flag
	// (registered on the standard library's flag set); expose that one.
	if f := flag.CommandLine.Lookup(config.KubeconfigFlagName); f != nil {
		fs.AddGoFlag(f)
		fs.Lookup(config.KubeconfigFlagName).Usage = "Path to a kubeconfig, to run out of the cluster (default: $KUBECONFIG, else the in-cluster config, else ~/.kube/config)."
	}
	fs.IntVarP(&g.verbosity, "v", "v", g.verbosity, "Log verbosity: 0 logs what an operator needs, higher levels add detail, up to 6 (higher is capped, since client-go would log credentials).")
}

// restartInPlace executes this program again with the same arguments and
// environment, in the same process and container, after why (a lost
// Lease: controller-runtime's manager cannot start twice). Exiting instead
// would count a container restart, and an API server outage long enough
// to lose the Lease again and again would put the agent in
// CrashLoopBackOff, down for minutes after the API server is back. The
// new program closes every socket of this one (Go opens them close-on-
// exec), so it serves its ports again at once. It returns only when the
// execution fails.
func restartInPlace(errOut io.Writer, why error) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("%w; and finding this program to start it again: %w", why, err)
	}
	fmt.Fprintf(errOut, "%v: starting again in place\n", why)
	return fmt.Errorf("%w; and starting again: %w", why, syscall.Exec(self, os.Args, os.Environ()))
}
