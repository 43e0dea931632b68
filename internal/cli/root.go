// Package cli assembles the kubectl offload command tree and runs it.
package cli

import (
	"context"
	goflag "flag"
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/klog/v2"

	"github.com/kubectl-offload/kubectl-offload/internal/cli/factory"
	"github.com/kubectl-offload/kubectl-offload/internal/doctor"
	"github.com/kubectl-offload/kubectl-offload/internal/exit"
	"github.com/kubectl-offload/kubectl-offload/internal/install"
	"github.com/kubectl-offload/kubectl-offload/internal/offload"
	"github.com/kubectl-offload/kubectl-offload/internal/peer"
	"github.com/kubectl-offload/kubectl-offload/internal/status"
	"github.com/kubectl-offload/kubectl-offload/internal/version"
)

const rootLong = `kubectl offload lets one Kubernetes cluster run its pods in another one.

A peer cluster shows up as a virtual node: pods scheduled there run in the
peer, and their status, logs and exec come back.

Get started:
  1. kubectl offload install                 (on both clusters)
  2. kubectl offload peer generate           (on the provider; prints step 3)
  3. kubectl offload peer out-of-band NAME … (on the consumer)
  4. kubectl offload namespace NS            (on the consumer)`

// NewRootCmd returns the root command with every subcommand wired in.
func NewRootCmd(streams genericiooptions.IOStreams) *cobra.Command {
	f := factory.New()
	root := &cobra.Command{
		Use:   "kubectl-offload",
		Short: "Run this cluster's pods in peer clusters through virtual nodes",
		Long:  rootLong,
		Annotations: map[string]string{
			cobra.CommandDisplayNameAnnotation: "kubectl offload",
		},
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetIn(streams.In)
	root.SetOut(streams.Out)
	root.SetErr(streams.ErrOut)
	f.AddFlags(root.PersistentFlags())
	addKlogFlags(root)

	root.AddCommand(install.NewCmdInstall(f, streams))
	root.AddCommand(install.NewCmdUpgrade(f, streams))
	root.AddCommand(install.NewCmdUninstall(f, streams))
	root.AddCommand(status.NewCmdStatus(f, streams))
	root.AddCommand(doctor.NewCmdDoctor(f, streams))
	root.AddCommand(peer.NewCmdPeer(f, streams))
	root.AddCommand(peer.NewCmdGenerateParent(f, streams))
	root.AddCommand(peer.NewCmdUnpeer(f, streams))
	root.AddCommand(offload.NewCmdNamespace(f, streams))
	root.AddCommand(offload.NewCmdUnoffload(f, streams))
	root.AddCommand(version.NewCmdVersion(f, streams))
	root.AddCommand(newCmdCompletion(root))
	return root
}

// Run executes the command line args and returns the process exit code. It is
// the only place that prints an error.
func Run(ctx context.Context, streams genericiooptions.IOStreams, args []string) int {
	root := NewRootCmd(streams)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err != nil && err.Error() != "" {
		fmt.Fprintf(streams.ErrOut, "Error: %v\n", err)
	}
	return exit.Code(err)
}

// addKlogFlags adds kubectl's -v flag, which sets client-go's log verbosity.
func addKlogFlags(root *cobra.Command) {
	fs := goflag.NewFlagSet("klog", goflag.ContinueOnError)
	klog.InitFlags(fs)
	root.PersistentFlags().AddGoFlag(fs.Lookup("v"))
}
