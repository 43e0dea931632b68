package app

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/manager"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/provider/auth"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
	"github.com/kubectl-offload/kubectl-offload/internal/scheme"
)

const authLong = `Run the peering authentication service: an HTTPS server on --listen, and
liveness (/healthz) and readiness (/readyz) probes over plain HTTP on
--health-probe-bind-address.

The TLS certificate comes from a CA the agent manages itself, with no
cert-manager: the first replica to start creates it in Secret
` + offloadv1alpha1.AuthCASecret + ` of the agent's namespace, and every replica then
issues itself a serving certificate, kept in memory, for the offload-auth
Service's names, localhost and each --tls-san. Consumers pin that CA by the
hash kubectl offload peer generate prints.

It serves the peering protocol: POST /v1/peer exchanges a peering token for
a tenant and ServiceAccount credentials valid for --credential-expiration,
POST /v1/refresh rotates them and POST /v1/unpeer removes the tenant.
Consumers reach this cluster's API server at --api-server-url.

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
	// APIServerURL is advertised to consumers; empty means the URL the
	// agent itself uses.
	APIServerURL string
	// CredentialExpiration is the lifetime of consumer credentials.
	CredentialExpiration time.Duration
	global               *globalOptions
}

func newCmdAuth(g *globalOptions) *cobra.Command {
	o := &authOptions{Options: auth.NewOptions(), CredentialExpiration: auth.DefaultCredentialExpiration, global: g}
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
	fs.StringVar(&o.APIServerURL, "api-server-url", o.APIServerURL, "API server URL given to consumers (default: the one the agent uses).")
	fs.DurationVar(&o.CredentialExpiration, "credential-expiration", o.CredentialExpiration, "Lifetime of the ServiceAccount tokens given to consumers, at least 10m.")
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
	if o.CredentialExpiration < auth.MinCredentialExpiration {
		return fmt.Errorf("--credential-expiration %s is too short: at least %s", o.CredentialExpiration, auth.MinCredentialExpiration)
	}
	return o.Options.Validate()
}

// Run serves until ctx is cancelled.
func (o *authOptions) Run(ctx context.Context) error {
	o.Logger = o.global.logger("auth")
	cfg, err := o.global.restConfig("auth")
	if err != nil {
		return err
	}
	// Its CA and signing key are read at start: an API server that does
	// not answer yet is waited for, not a reason to exit.
	if err := manager.WaitForAPIServer(ctx, cfg, o.HealthProbeBindAddress, o.Logger); err != nil || ctx.Err() != nil {
		return err
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		return fmt.Errorf("creating the Kubernetes client: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("creating the Kubernetes client: %w", err)
	}
	// Service account issuer discovery: every ServiceAccount may read it
	// (ClusterRoleBinding system:service-account-issuer-discovery).
	o.SigningKeys = func(ctx context.Context) ([]byte, error) {
		return kube.CoreV1().RESTClient().Get().AbsPath("/openid/v1/jwks").DoRaw(ctx)
	}
	srv, err := auth.NewServer(c, o.Options)
	if err != nil {
		return err
	}
	po, err := o.peeringOptions(cfg)
	if err != nil {
		return err
	}
	po.KubernetesVersion = peering.KubernetesVersionOf(kube.Discovery())
	peering, err := auth.NewPeering(c, po)
	if err != nil {
		return err
	}
	peering.Register(srv)
	go peering.CleanTokens(ctx)
	return srv.Run(ctx)
}

// peeringOptions advertises --api-server-url, or else the API server the
// agent reaches (in a pod, the kubernetes Service), with the CA the agent
// trusts; without one the endpoints read ConfigMap kube-root-ca.crt.
func (o *authOptions) peeringOptions(cfg *rest.Config) (auth.PeeringOptions, error) {
	po := auth.PeeringOptions{
		Namespace:            o.Namespace,
		APIServerURL:         o.APIServerURL,
		APIServerCA:          cfg.CAData,
		CredentialExpiration: o.CredentialExpiration,
		Logger:               o.Logger,
	}
	if po.APIServerURL == "" {
		po.APIServerURL = cfg.Host
		o.Logger.Info("No --api-server-url: advertising the API server the agent uses, which peers may not reach", "url", cfg.Host)
	}
	if !peering.IsHTTPSURL(po.APIServerURL) {
		return po, fmt.Errorf("the API server URL %q given to consumers is not https://HOST[:PORT]: consumers would send their credentials in clear; pass --api-server-url https://HOST:PORT", po.APIServerURL)
	}
	if len(po.APIServerCA) == 0 && cfg.CAFile != "" {
		if ca, err := os.ReadFile(cfg.CAFile); err == nil {
			po.APIServerCA = ca
		} else {
			o.Logger.Info("Cannot read the API server CA file; using ConfigMap kube-root-ca.crt", "file", cfg.CAFile, "err", err.Error())
		}
	}
	return po, nil
}
