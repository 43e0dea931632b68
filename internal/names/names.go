// Package names holds the names of the objects kubectl-offload installs, so
// the CLI and the agent agree on them.
package names

const (
	// ReleaseName is the Helm release of the offload chart.
	ReleaseName = "offload"
	// ChartName is the name of the embedded chart.
	ChartName = "offload"
	// IdentityConfigMap holds the cluster identity (ID and name).
	IdentityConfigMap = "offload-cluster-identity"
	// ControllerManager is the Deployment running offload-agent controller-manager.
	ControllerManager = "offload-controller-manager"
	// Auth is the Deployment and Service running offload-agent auth.
	Auth = "offload-auth"
	// AuthCASecret is the Secret, in the install namespace, holding the CA
	// that the auth service manages; consumers pin it by its hash.
	AuthCASecret = "offload-auth-ca"
	// WebhookCertSecret holds the scheduling webhook's CA and serving
	// certificate, kept by the controller-manager.
	WebhookCertSecret = "offload-webhook-cert"
	// AuthCACertKey is the key of the PEM CA certificate in AuthCASecret.
	AuthCACertKey = "ca.crt"
	// VersionLabel is the standard label carrying a component's version.
	VersionLabel = "app.kubernetes.io/version"
)
