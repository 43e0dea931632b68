package doctor

import (
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/kubectl-offload/kubectl-offload/internal/cli/factory"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/output"
)

const doctorLong = `Look actively for the problems that break peering and offloading, and say
how to fix each one.

Where kubectl offload status reads what the cluster reports, kubectl
offload doctor also probes it from where the command runs:

  - API server URL: the URL advertised to peers is not loopback (kind and
    k3s kubeconfigs say 127.0.0.1, which peers cannot reach).
  - Auth endpoint: a TCP connection and TLS handshake to the auth URL peers
    are given (the certificate is not checked and nothing is sent), and a
    warning when that URL is loopback or a cluster-internal .svc name.
  - Gateway endpoint, with the network fabric: the address consumers dial,
    a LoadBalancer without an address, a loopback address.
  - CIDRs: the pod and service CIDRs are set and do not overlap each other
    or the remap pools.
  - DaemonSets and webhooks: DaemonSets that would put pods on virtual
    nodes, and other admission webhooks that can block or change offloaded
    pods (they intercept pods with failurePolicy Fail and do not exclude
    offloaded namespaces).
  - Clock skew: each peer's clock, read from the Date header of its auth
    service, against this cluster's API server; credentials expire and
    rotate on time.
  - Versions: the Kubernetes version against the chart's kubeVersion, and
    this plugin's version against the agent's.

Each check is marked ✓ (ok), ! (warning) or ✗ (failed) and says what to
run. kubectl offload doctor exits 1 when any check failed; warnings do not
fail.`

const doctorExample = `  # Look for problems in the current cluster
  kubectl offload doctor

  # The report as JSON, for scripts; exit code 1 when a check failed
  kubectl offload doctor -o json

  # Give slow networks more time for each probe
  kubectl offload doctor --probe-timeout 15s`

// NewCmdDoctor returns the doctor command.
func NewCmdDoctor(f factory.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	return newCmdDoctor(f, NewOptions(streams))
}

// newCmdDoctor returns the doctor command bound to o, whose values are the flag defaults.
func newCmdDoctor(f factory.Factory, o *Options) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "doctor",
		Short:   "Probe for common problems and say how to fix them",
		Long:    doctorLong,
		Example: doctorExample,
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
	cmd.Flags().DurationVar(&o.Timeout, "timeout", o.Timeout, "How long all the checks together may take.")
	cmd.Flags().DurationVar(&o.ProbeTimeout, "probe-timeout", o.ProbeTimeout, "How long each network probe of an endpoint or a peer may take.")
	output.AddFlag(cmd.Flags(), &o.Output, o.Output)
	return cmd
}
