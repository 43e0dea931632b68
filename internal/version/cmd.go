// Package version is the version command: the build of the plugin and, when
// a cluster is reachable, the versions installed there.
package version

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/kubectl-offload/kubectl-offload/internal/buildinfo"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/factory"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/output"
)

const versionExample = `  # Show the client version and, where a cluster is reachable, the installed versions
  kubectl offload version

  # Only the client version, as JSON
  kubectl offload version --client -o json`

// Options are the options of `kubectl offload version`.
type Options struct {
	genericiooptions.IOStreams

	ClientOnly bool
	Output     output.Format
	Timeout    time.Duration

	factory factory.Factory
}

// NewOptions returns Options with defaults.
func NewOptions(streams genericiooptions.IOStreams) *Options {
	return &Options{IOStreams: streams, Output: output.Table, Timeout: 5 * time.Second}
}

// NewCmdVersion returns the version command.
func NewCmdVersion(f factory.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewOptions(streams)
	cmd := &cobra.Command{
		Use:     "version",
		Short:   "Print the client version and the versions installed in the cluster",
		Long:    "Print the version of kubectl offload and, when the current cluster is reachable, its Kubernetes version and the installed chart and agent versions.",
		Example: versionExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := o.Complete(f); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	cmd.Flags().BoolVar(&o.ClientOnly, "client", o.ClientOnly, "Print the client version only, without contacting a cluster.")
	cmd.Flags().DurationVar(&o.Timeout, "server-timeout", o.Timeout, "How long to wait for the cluster before reporting the client version only.")
	output.AddFlag(cmd.Flags(), &o.Output, o.Output)
	return cmd
}

// Complete fills in the factory.
func (o *Options) Complete(f factory.Factory) error {
	o.factory = f
	return nil
}

// Validate checks the options.
func (o *Options) Validate() error {
	if o.Timeout <= 0 {
		return fmt.Errorf("--server-timeout must be positive, got %s", o.Timeout)
	}
	return o.Output.Validate()
}

// Run prints the report. An unreachable cluster is a warning, not an error:
// the client version is still useful.
func (o *Options) Run(ctx context.Context) error {
	r := Report{TypeMeta: reportType, Client: buildinfo.Get()}
	if !o.ClientOnly {
		ctx, cancel := context.WithTimeout(ctx, o.Timeout)
		defer cancel()
		server, err := ServerVersions(ctx, o.factory)
		if err != nil {
			output.NewSteps(o.ErrOut).Warn("cluster not reachable, showing the client version only: %v", err)
		} else {
			r.Server = server
		}
	}
	return output.Write(o.Out, o.Output, r, r.table)
}
