package app

import (
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/fabric/routing"
)

const fabricLong = `Run the network fabric on this node, as the offload-fabric DaemonSet does on
every real node (host network, NET_ADMIN).

It routes each peer's view of pod addresses to that peer's gateway pod:
directly on the gateway's node, through the gateway's node elsewhere. It
also keeps the node's CNI from masquerading pods' traffic to the views, so
the peer sees which pod called. The routes live in routing table 28518
(protocol 0x6f), which policy rules consult only for pod sources and for
traffic the node forwards, never for the node's own; the nftables rule
lives in table offload-fabric. On SIGTERM or SIGINT (an uninstall, or the
node leaving the DaemonSet) all are removed, and a restart after a crash
replaces whatever was left.`

const fabricExample = `  # In the DaemonSet's pod, as the chart runs it
  offload-agent fabric --node-name "$NODE_NAME"`

func newCmdFabric(g *globalOptions) *cobra.Command {
	o := routing.Options{Interval: 2 * time.Second}
	cmd := &cobra.Command{
		Use:     "fabric",
		Short:   "Route the peers' views to their gateways on this node",
		Long:    fabricLong,
		Example: fabricExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Namespace = fromEnv(o.Namespace, envNamespace)
			o.NodeName = fromEnv(o.NodeName, envNodeName)
			if o.Namespace == "" || o.NodeName == "" {
				return errors.New("pass --namespace and --node-name (or set POD_NAMESPACE and NODE_NAME)")
			}
			cfg, err := g.restConfig("fabric")
			if err != nil {
				return err
			}
			return routing.Run(cmd.Context(), cfg, o, g.logger("fabric"))
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "Namespace of the Tunnels and gateways (default: $POD_NAMESPACE).")
	fs.StringVar(&o.NodeName, "node-name", o.NodeName, "Name of this node (default: $NODE_NAME).")
	fs.DurationVar(&o.Interval, "interval", o.Interval, "How often the routes are compared with the Tunnels and gateway pods.")
	return cmd
}
