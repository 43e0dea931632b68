package webhook

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// Names of the webhook's objects; the chart creates them with these names.
const (
	// Path is where the webhook server serves the pod mutating webhook.
	Path = "/mutate-pods"
	// DefaultServiceName is the Service, in the agent's namespace, in front
	// of the controller-manager's webhook server.
	DefaultServiceName = "offload-webhook"
	// DefaultConfigurationName is the MutatingWebhookConfiguration whose
	// caBundle the CertManager keeps.
	DefaultConfigurationName = "offload-webhook"
	// DefaultResyncInterval is how often the CertManager checks the Secret,
	// the files and the caBundle once they are right.
	DefaultResyncInterval = time.Minute
)

// DefaultCertDir is where controller-runtime's webhook server reads
// tls.crt and tls.key unless told otherwise.
var DefaultCertDir = filepath.Join(os.TempDir(), "k8s-webhook-server", "serving-certs")

// setupTimeout bounds the first certificate issue in Setup.
const setupTimeout = 30 * time.Second

// Options configure the scheduling webhook and its CertManager.
type Options struct {
	// Namespace is the agent's namespace, which holds the webhook Service
	// and the certificate Secret.
	Namespace string
	// ServiceName is the webhook Service; the serving certificate is valid
	// for <ServiceName>.<Namespace>.svc and .svc.cluster.local.
	ServiceName string
	// ConfigurationName is the MutatingWebhookConfiguration that gets the caBundle.
	ConfigurationName string
	// SecretName is the Secret that holds the CA and the serving certificate.
	SecretName string
	// CertDir is the directory the webhook server reads tls.crt and tls.key from.
	CertDir string
	// ExtraHosts are more DNS names or IP addresses for the serving
	// certificate, such as 127.0.0.1 in tests.
	ExtraHosts []string
	// TolerationSeconds is how long offloaded pods stay bound to an
	// unreachable or not-ready node; nil means forever.
	TolerationSeconds *int64
	// ResyncInterval is how often the CertManager rechecks everything.
	ResyncInterval time.Duration
	// Logger receives the webhook's logs; the zero value discards them.
	Logger klog.Logger
}

// NewOptions returns Options with the names the chart uses and unlimited
// toleration of unreachable and not-ready nodes.
func NewOptions() Options {
	return Options{
		ServiceName:       DefaultServiceName,
		ConfigurationName: DefaultConfigurationName,
		SecretName:        offloadv1alpha1.WebhookCertSecret,
		CertDir:           DefaultCertDir,
		ResyncInterval:    DefaultResyncInterval,
	}
}

// Validate checks the options.
func (o Options) Validate() error {
	switch {
	case o.Namespace == "":
		return errors.New("the webhook needs the agent's namespace: pass --namespace or set POD_NAMESPACE")
	case o.ServiceName == "" || o.ConfigurationName == "" || o.SecretName == "":
		return errors.New("the webhook Service, MutatingWebhookConfiguration and Secret names must be set")
	case o.CertDir == "":
		return errors.New("the webhook certificate directory must be set")
	case o.TolerationSeconds != nil && *o.TolerationSeconds < 0:
		return fmt.Errorf("the unreachable toleration must not be negative, got %ds; leave it unset for no limit", *o.TolerationSeconds)
	case o.ResyncInterval <= 0:
		return fmt.Errorf("the certificate resync interval must be positive, got %s", o.ResyncInterval)
	}
	return nil
}

// Hosts are the names the serving certificate is valid for: the Service's
// DNS names and ExtraHosts.
func (o Options) Hosts() []string {
	svc := o.ServiceName + "." + o.Namespace + ".svc"
	return append([]string{svc, svc + ".cluster.local"}, o.ExtraHosts...)
}

// Setup adds the scheduling webhook to mgr: it issues the serving
// certificate into opts.CertDir before mgr starts (the webhook server
// fails to start without one), adds the CertManager that renews it and
// keeps the caBundle, registers the pod handler at Path on mgr's webhook
// server and a readiness check that passes once that server serves.
//
// opts.CertDir must be the webhook server's CertDir. When mgr's server is
// controller-runtime's default one, Setup checks that. Setup reads and
// writes the certificate Secret, so it fails when the API server cannot be
// reached within 30 s or denies that.
func Setup(mgr manager.Manager, opts Options) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	server := mgr.GetWebhookServer()
	if s, ok := server.(*ctrlwebhook.DefaultServer); ok {
		dir := s.Options.CertDir
		if dir == "" {
			dir = DefaultCertDir
		}
		if filepath.Clean(dir) != filepath.Clean(opts.CertDir) {
			return fmt.Errorf("the webhook server reads certificates from %s but the webhook writes them to %s: configure both with the same directory", dir, opts.CertDir)
		}
	}
	certs := NewCertManager(mgr.GetClient(), mgr.GetAPIReader(), opts)
	// A certificate this container wrote before (offload-agent executes
	// itself again after losing its Lease, maybe while the API server is
	// still away) serves until the CertManager, which starts by checking
	// it, replaces it: starting does not wait for the API server then.
	if certPEM, err := os.ReadFile(filepath.Join(opts.CertDir, corev1.TLSCertKey)); err != nil || !validCert(certPEM, time.Now()) {
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		if err := certs.EnsureCertificate(ctx); err != nil {
			return fmt.Errorf("issuing the webhook certificate (the controller-manager needs get, create and update on Secrets in %s): %w", opts.Namespace, err)
		}
	}
	if err := mgr.Add(certs); err != nil {
		return fmt.Errorf("adding the webhook certificate manager: %w", err)
	}
	handler := &PodMutator{Client: mgr.GetClient(), Reader: mgr.GetAPIReader(), Options: opts}
	server.Register(Path, NewAdmissionWebhook(handler, mgr.GetScheme()))
	if err := mgr.AddReadyzCheck("webhook", server.StartedChecker()); err != nil {
		return fmt.Errorf("adding the webhook readiness check: %w", err)
	}
	return nil
}
