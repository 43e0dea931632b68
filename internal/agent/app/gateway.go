package app

import (
	"context"
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/fabric/gateway"
)

const gatewayLong = `Run the WireGuard network gateway of one peering, inside the gateway pod's
own network namespace.

The device is the kernel's WireGuard where the module exists and embedded
wireguard-go otherwise (the configuration's implementation: auto, kernel or
userspace); wgctrl configures it either way. nftables rules and policy
routes, programmed through netlink, translate between this cluster's views
of the peer's pod CIDRs and the peer's real addresses, let the peer reach
only the allowed local pods, and clamp TCP's MSS to the tunnel's MTU. A
UDP echo over the tunnel tells whether the peer really answers.

In a cluster (--tunnel), the configuration is the Tunnel object of that
name in --namespace, which the controller-manager keeps; the gateway watches
only that object and writes its status (implementation, endpoint, last
handshake, bytes, connected, path MTU) back. The private key is a file, from
the gateway's Secret. Out of a cluster (--config), it is a JSON file,
re-read when it changes. /healthz and /readyz are the probes and /status
reports the tunnel as JSON, on --health-probe-bind-address.

The gateway needs root, NET_ADMIN and MKNOD in its own pod's network
namespace, and nothing privileged: it turns forwarding on, reverse-path
filtering off and local sources on for its devices over rtnetlink, since
containers see /proc/sys read-only.

The process removes its device, rules and routes on SIGTERM or SIGINT.`

const gatewayExample = `  # In the gateway pod, as the controller runs it
  offload-agent gateway --tunnel provider --namespace offload-system \
    --private-key-file /etc/offload/gateway/privateKey

  # Out of a cluster, from a JSON configuration
  offload-agent gateway --config gateway.json`

// gatewayOptions are the options of offload-agent gateway.
type gatewayOptions struct {
	gateway.Options
	// Tunnel and Namespace name the Tunnel object of the in-cluster mode.
	Tunnel, Namespace string
	// Base is what the pod decides: interface, implementation, key file.
	Base   gateway.Config
	global *globalOptions
}

func newCmdGateway(g *globalOptions) *cobra.Command {
	o := &gatewayOptions{
		Options: gateway.Options{HealthProbeBindAddress: ":8083", ReloadInterval: time.Second},
		Base: gateway.Config{Interface: "offload0", Implementation: gateway.ImplementationAuto,
			PrivateKeyFile: "/etc/offload/gateway/privateKey"},
		global: g,
	}
	cmd := &cobra.Command{
		Use:     "gateway",
		Short:   "Run the WireGuard network gateway of one peering",
		Long:    gatewayLong,
		Example: gatewayExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.Run(cmd.Context())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.ConfigFile, "config", o.ConfigFile, "Path of the gateway's JSON configuration.")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", o.HealthProbeBindAddress, "Address of the plain-HTTP /healthz, /readyz and /status endpoints.")
	fs.DurationVar(&o.ReloadInterval, "reload-interval", o.ReloadInterval, "How often the configuration file is checked for changes.")
	fs.StringVar(&o.Tunnel, "tunnel", o.Tunnel, "Name of the Tunnel object to run (in a cluster).")
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "Namespace of the Tunnel (default: $POD_NAMESPACE).")
	fs.StringVar(&o.Base.Interface, "interface", o.Base.Interface, "Name of the WireGuard device (in a cluster).")
	fs.StringVar((*string)(&o.Base.Implementation), "implementation", string(o.Base.Implementation), "WireGuard device: auto, kernel or userspace (in a cluster).")
	fs.StringVar(&o.Base.PrivateKeyFile, "private-key-file", o.Base.PrivateKeyFile, "File holding the gateway's private key (in a cluster).")
	return cmd
}

// Run runs the gateway from the Tunnel object or the configuration file.
func (o *gatewayOptions) Run(ctx context.Context) error {
	log := o.global.logger("gateway")
	switch {
	case o.Tunnel != "" && o.ConfigFile != "":
		return errors.New("--tunnel and --config exclude each other: pass one")
	case o.Tunnel == "" && o.ConfigFile == "":
		return errors.New("pass --tunnel NAME (in a cluster) or --config FILE")
	case o.ConfigFile != "":
		return gateway.New(o.Options, log).Run(ctx)
	}
	ns := fromEnv(o.Namespace, envNamespace)
	if ns == "" {
		return errors.New("the namespace is not set: pass --namespace or set POD_NAMESPACE")
	}
	cfg, err := o.global.restConfig("gateway")
	if err != nil {
		return err
	}
	ic, err := gateway.NewInCluster(cfg, ns, o.Tunnel, o.Base)
	if err != nil {
		return err
	}
	if err := ic.Start(ctx); err != nil {
		return err
	}
	o.Load, o.Report = ic.Load, ic.Report
	return gateway.New(o.Options, log).Run(ctx)
}
