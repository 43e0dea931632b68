package app

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/auth"
	"github.com/kubectl-offload/kubectl-offload/internal/scheme"
)

const authLong = `Run the peering authentication service: an HTTPS server on --listen, and
liveness (/healthz) and readiness (/readyz) probes over plain HTTP on
--health-probe-bind-address.

The TLS certificate comes from a CA the agent manages itself, with no
cert-manager: the first replica to start creates it in Secret
` + auth.CASecretName + ` of the agent's namespace, and every replica then
issues itself a serving certificate, kept in memory, for the offload-auth
Service's names, localhost and each --tls-san. Consumers pin that CA by the
hash kubectl offload peer generate prints.

The process stops gracefully on SIGTERM or SIGINT.`

const authExample = `  # In a pod, as the chart runs it
  offload-agent auth --listen=:8443 --health-probe-bind-address=:8081

  # Out of the cluster, for debugging, on local ports
  offload-agent auth --kubeconfig ~/.kube/config --namespace offload-system \
    --listen=127.0.0.1:8443 --health-probe-bind-address=127.0.0.1:8081

  # Also valid for the address and name peers use to reach the service
  offload-agent auth --tls-san 192.0.2.10 --tls-san auth.example.com`

// authOptions are the options of offload-agent auth.
type authOptions struct {
	auth.Options
	global *globalOptions
}

func newCmdAuth(g *globalOptions) *cobra.Command {
	o := &authOptions{Options: auth.NewOptions(), global: g}
	cmd := &cobra.Command{
		Use:     "auth",
		Short:   "Run the peering authentication service",
		Long:    authLong,
		Example: authExample,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Complete()
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(cmd.Context())
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&o.Namespace, "namespace", o.Namespace, "Namespace of the agent, which holds the CA Secret (default: $POD_NAMESPACE).")
	fs.StringVar(&o.Listen, "listen", o.Listen, "Address of the HTTPS server.")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", o.HealthProbeBindAddress, "Address of the plain-HTTP /healthz and /readyz endpoints.")
	fs.StringSliceVar(&o.TLSSANs, "tls-san", o.TLSSANs, "Extra IP address or DNS name for the serving certificate (repeatable).")
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", o.ShutdownTimeout, "How long in-flight requests may take after SIGTERM.")
	return cmd
}

// Complete fills the namespace from the environment the chart sets when the
// flag leaves it empty.
func (o *authOptions) Complete() {
	o.Namespace = fromEnv(o.Namespace, envNamespace)
}

// Validate checks the options.
func (o *authOptions) Validate() error {
	return o.Options.Validate()
}

// Run serves until ctx is cancelled.
func (o *authOptions) Run(ctx context.Context) error {
	o.Logger = o.global.logger("auth")
	cfg, err := o.global.restConfig("auth")
	if err != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return fmt.Errorf("creating the Kubernetes client: %w", err)
	}
	srv, err := auth.NewServer(c, o.Options)
	if err != nil {
		return err
	}
	return srv.Run(ctx)
}
