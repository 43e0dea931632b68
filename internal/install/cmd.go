package install

import (
	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/kubectl-offload/kubectl-offload/internal/cli/factory"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/output"
)

const installLong = `Install kubectl-offload on the current cluster: the CRDs, and the chart
embedded in this plugin (the agent's controller-manager and auth service).

The distribution (kind, k3s, kubeadm), the pod and service CIDRs and the API
server URL that peers will use are detected and shown, each with where it
came from; flags override them, and an upgrade keeps the ones the installed
release has.

The network fabric (a WireGuard gateway per peering and a routes-only
DaemonSet, so offloaded pods and local pods reach each other by IP and
through Services) runs when the pod CIDR is known; --network=false leaves it
off for clusters that already share a network.
Running install again upgrades in place and changes nothing when nothing
changed. The cluster identity is created once and never changes.`

const installExample = `  # Install with detected settings
  kubectl offload install

  # Install on a kind cluster whose API server peers reach at 172.18.0.2
  kubectl offload install --cluster-name dev --api-server-url https://172.18.0.2:6443

  # Show the manifests that would be applied, without touching the cluster
  kubectl offload install --dry-run -o yaml

  # Expose the auth service through a LoadBalancer
  kubectl offload install --set auth.service.type=LoadBalancer

  # Give the pod CIDR detection could not find, so the network fabric runs
  kubectl offload install --pod-cidr 10.244.0.0/16

  # Publish this provider's gateways behind NAT at a public address
  kubectl offload install --gateway-address vpn.example.com:51820`

// NewCmdInstall returns the install command.
func NewCmdInstall(f factory.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewOptions(streams)
	cmd := &cobra.Command{
		Use:     "install",
		Short:   "Install kubectl-offload on the cluster, or upgrade it in place",
		Long:    installLong,
		Example: installExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return completeValidateRun(cmd, f, o)
		},
	}
	addInstallFlags(cmd, o)
	return cmd
}

// NewCmdUpgrade returns the upgrade command: install on an existing release.
func NewCmdUpgrade(f factory.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewOptions(streams)
	o.UpgradeOnly = true
	cmd := &cobra.Command{
		Use:   "upgrade",
		Short: "Upgrade kubectl-offload on the cluster to this plugin's version",
		Long:  "Upgrade the installed kubectl-offload release to the chart embedded in this plugin. It takes the same flags as install, and fails when kubectl-offload is not installed.",
		Example: `  # Upgrade to this plugin's version
  kubectl offload upgrade

  # Upgrade and change a value
  kubectl offload upgrade --set sharingPercentage=30`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return completeValidateRun(cmd, f, o)
		},
	}
	addInstallFlags(cmd, o)
	return cmd
}

func completeValidateRun(cmd *cobra.Command, f factory.Factory, o *Options) error {
	o.NetworkSet = cmd.Flags().Changed("network")
	if err := o.Complete(f); err != nil {
		return err
	}
	if err := o.Validate(); err != nil {
		return err
	}
	return o.Run(cmd.Context())
}

func addInstallFlags(cmd *cobra.Command, o *Options) {
	fs := cmd.Flags()
	fs.StringVar(&o.ClusterName, "cluster-name", o.ClusterName, "Name of this cluster as peers see it (default: the installed name, the detected name or the kubeconfig context).")
	fs.StringVar(&o.Provider, "provider", o.Provider, "Kubernetes distribution: kind, k3s, kubeadm or generic (default: detected).")
	fs.StringVar(&o.PodCIDR, "pod-cidr", o.PodCIDR, "Pod CIDR of this cluster (default: detected).")
	fs.StringVar(&o.ServiceCIDR, "service-cidr", o.ServiceCIDR, "Service CIDR of this cluster (default: detected).")
	fs.StringVar(&o.APIServerURL, "api-server-url", o.APIServerURL, "API server URL that peers use (default: detected).")
	fs.BoolVar(&o.Network, "network", o.Network, "Run the network fabric (default: when the pod CIDR is known); --network=false when the clusters already share a network.")
	fs.StringVar(&o.GatewayServiceType, "gateway-service-type", o.GatewayServiceType, "How this cluster's gateways are published to consumers: NodePort or LoadBalancer (default NodePort).")
	fs.StringVar(&o.GatewayAddress, "gateway-address", o.GatewayAddress, "HOST or HOST:PORT consumers dial this cluster's gateways at, behind NAT (default: the LoadBalancer or node address).")
	fs.StringArrayVar(&o.Set, "set", o.Set, "Set a chart value, as in helm: key=value (repeatable).")
	fs.StringArrayVarP(&o.ValueFiles, "values", "f", o.ValueFiles, "Chart values file (repeatable).")
	fs.DurationVar(&o.Timeout, "timeout", o.Timeout, "How long to wait for the installation.")
	fs.BoolVar(&o.Wait, "wait", o.Wait, "Wait until the CRDs are established and the Deployments available.")
	fs.BoolVar(&o.DryRun, "dry-run", o.DryRun, "Print the manifests instead of applying them; nothing is changed.")
	output.AddFlag(fs, &o.Output, o.Output)
	_ = cmd.RegisterFlagCompletionFunc("provider", cobra.FixedCompletions([]string{"kind", "k3s", "kubeadm", "generic"}, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("gateway-service-type", cobra.FixedCompletions([]string{"NodePort", "LoadBalancer"}, cobra.ShellCompDirectiveNoFileComp))
}

// NewCmdUninstall returns the uninstall command.
func NewCmdUninstall(f factory.Factory, streams genericiooptions.IOStreams) *cobra.Command {
	o := NewUninstallOptions(streams)
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Remove kubectl-offload from the cluster",
		Long: `Remove the kubectl-offload release from the cluster.

Uninstall refuses while peerings (in either direction) or offloaded
namespaces exist, names them and the command that ends each; --force ends
them all first. Either way the agent finishes its own cleanup before it is
removed: uninstall waits (up to --timeout) for the objects it is still
deleting, and stops with their names, uninstalling nothing, if they do not
go. No tenant or twin namespace is left Terminating. The CRDs, the cluster identity and the auth CA
(Secret offload-auth-ca) are kept, so a later install keeps the same cluster
ID and peers' CA pins stay valid; --purge removes them too, with the webhook
certificate, and the namespace if install created it.`,
		Example: `  # Remove the agent, keep the identity and the CRDs
  kubectl offload uninstall

  # Remove everything
  kubectl offload uninstall --purge

  # End every peering and offloaded namespace, then remove everything
  kubectl offload uninstall --force --purge`,
		Args: cobra.NoArgs,
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
	cmd.Flags().BoolVar(&o.Force, "force", o.Force, "End every peering and offloaded namespace first, then uninstall.")
	cmd.Flags().BoolVar(&o.Purge, "purge", o.Purge, "Also remove the CRDs, the cluster identity, the agent's certificates and the namespace.")
	cmd.Flags().DurationVar(&o.Timeout, "timeout", o.Timeout, "How long to wait for the removal.")
	return cmd
}
