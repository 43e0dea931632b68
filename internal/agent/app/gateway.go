package app

import (
	"errors"
	"time"

	"github.com/spf13/cobra"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/gateway"
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

The configuration is a JSON file (the controller renders it into the
gateway's Secret); it is re-read when it changes. /healthz and /readyz are
the probes and /status reports the tunnel as JSON, on
--health-probe-bind-address.

--init only sets the network namespace's sysctls (forwarding, reverse-path
filtering, local sources) and exits: the chart runs it in a privileged init
container, because containers see /proc/sys read-only.

The process removes its device, rules and routes on SIGTERM or SIGINT.`

const gatewayExample = `  # In the gateway pod, as the controller runs it
  offload-agent gateway --config /etc/offload/gateway/config.json

  # The init container
  offload-agent gateway --init`

// gatewayOptions are the options of offload-agent gateway.
type gatewayOptions struct {
	gateway.Options
	Init   bool
	global *globalOptions
}

func newCmdGateway(g *globalOptions) *cobra.Command {
	o := &gatewayOptions{
		Options: gateway.Options{HealthProbeBindAddress: ":8083", ReloadInterval: 2 * time.Second},
		global:  g,
	}
	cmd := &cobra.Command{
		Use:     "gateway",
		Short:   "Run the WireGuard network gateway of one peering",
		Long:    gatewayLong,
		Example: gatewayExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Init {
				return gateway.SetSysctls()
			}
			if o.ConfigFile == "" {
				return errors.New("--config is required: the gateway's JSON configuration")
			}
			return gateway.New(o.Options, o.global.logger("gateway")).Run(cmd.Context())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.ConfigFile, "config", o.ConfigFile, "Path of the gateway's JSON configuration.")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", o.HealthProbeBindAddress, "Address of the plain-HTTP /healthz, /readyz and /status endpoints.")
	fs.DurationVar(&o.ReloadInterval, "reload-interval", o.ReloadInterval, "How often the configuration file is checked for changes.")
	fs.BoolVar(&o.Init, "init", o.Init, "Only set the network namespace's sysctls, then exit.")
	return cmd
}
