// Package factory gives commands their clients: the kubeconfig flags every
// kubectl plugin has, and the Kubernetes, controller-runtime and Helm clients
// built from them.
package factory

import (
	"fmt"

	"github.com/spf13/pflag"
	"helm.sh/helm/v3/pkg/action"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubectl-offload/kubectl-offload/internal/scheme"
)

// DefaultNamespace is the namespace kubectl-offload installs its agent into.
const DefaultNamespace = "offload-system"

// Factory builds clients for the cluster the kubeconfig flags select.
type Factory interface {
	genericclioptions.RESTClientGetter
	// Namespace returns the namespace kubectl-offload is installed into (--namespace).
	Namespace() string
	// ContextName returns the kubeconfig context in use: --context, else the current context.
	ContextName() string
	// RESTConfig returns the client configuration for the selected cluster.
	RESTConfig() (*rest.Config, error)
	// KubeClient returns a typed client-go clientset.
	KubeClient() (kubernetes.Interface, error)
	// Client returns a controller-runtime client that knows the offload.io types.
	Client() (client.Client, error)
	// HelmConfig returns a Helm action configuration for releases in namespace.
	HelmConfig(namespace string) (*action.Configuration, error)
}

// Flags is the Factory behind every command: cli-runtime ConfigFlags plus --namespace.
type Flags struct {
	*genericclioptions.ConfigFlags
	namespace string
}

var _ Factory = &Flags{}

// New returns a Factory whose flags are not yet bound; call AddFlags to bind them.
func New() *Flags {
	flags := genericclioptions.NewConfigFlags(true)
	// --namespace names the install namespace of kubectl-offload, as in
	// other multi-cluster CLIs, not the namespace of a context.
	flags.Namespace = nil
	return &Flags{ConfigFlags: flags, namespace: DefaultNamespace}
}

// AddFlags binds the kubeconfig flags and --namespace to fs.
func (f *Flags) AddFlags(fs *pflag.FlagSet) {
	f.ConfigFlags.AddFlags(fs)
	fs.StringVarP(&f.namespace, "namespace", "n", f.namespace, "Namespace kubectl-offload is installed in.")
}

// Namespace returns the install namespace.
func (f *Flags) Namespace() string { return f.namespace }

// ContextName returns the kubeconfig context in use.
func (f *Flags) ContextName() string {
	if f.Context != nil && *f.Context != "" {
		return *f.Context
	}
	raw, err := f.ToRawKubeConfigLoader().RawConfig()
	if err != nil {
		return ""
	}
	return raw.CurrentContext
}

// RESTConfig returns the client configuration for the selected cluster.
func (f *Flags) RESTConfig() (*rest.Config, error) {
	cfg, err := f.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("loading kubeconfig: %w", err)
	}
	return cfg, nil
}

// KubeClient returns a typed client-go clientset.
func (f *Flags) KubeClient() (kubernetes.Interface, error) {
	cfg, err := f.RESTConfig()
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// Client returns a controller-runtime client with the project's scheme. It
// is a client.WithWatch, for the commands that wait on objects.
func (f *Flags) Client() (client.Client, error) {
	cfg, err := f.RESTConfig()
	if err != nil {
		return nil, err
	}
	return client.NewWithWatch(cfg, client.Options{Scheme: scheme.Scheme})
}

// HelmConfig returns a Helm action configuration for releases in namespace,
// storing release records in Secrets like the helm CLI does.
func (f *Flags) HelmConfig(namespace string) (*action.Configuration, error) {
	cfg := new(action.Configuration)
	if err := cfg.Init(f.withNamespace(namespace), namespace, "secret", func(format string, v ...any) {
		klog.V(4).Infof(format, v...)
	}); err != nil {
		return nil, fmt.Errorf("initialising helm: %w", err)
	}
	return cfg, nil
}

// withNamespace returns a RESTClientGetter that selects the same cluster and
// defaults to namespace, which Helm uses for the objects it creates.
func (f *Flags) withNamespace(namespace string) genericclioptions.RESTClientGetter {
	c := genericclioptions.NewConfigFlags(true)
	c.KubeConfig, c.ClusterName, c.AuthInfoName, c.Context = f.KubeConfig, f.ClusterName, f.AuthInfoName, f.Context
	c.APIServer, c.TLSServerName, c.Insecure = f.APIServer, f.TLSServerName, f.Insecure
	c.CertFile, c.KeyFile, c.CAFile, c.BearerToken = f.CertFile, f.KeyFile, f.CAFile, f.BearerToken
	c.Impersonate, c.ImpersonateUID, c.ImpersonateGroup = f.Impersonate, f.ImpersonateUID, f.ImpersonateGroup
	c.Timeout = f.Timeout
	c.Namespace = &namespace
	return c
}
