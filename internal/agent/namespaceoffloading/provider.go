package namespaceoffloading

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/providerclient"
)

// providerTimeout bounds every request to a provider, so that one that
// does not answer holds a reconciliation for no longer than that.
const providerTimeout = 10 * time.Second

// errNoCredentials: the peer has no kubeconfig Secret (any more).
var errNoCredentials = providerclient.ErrNoCredentials

// provider is a client of one peer's API server, limited to the tenant
// namespace the consumer has there.
type provider struct {
	// creds is what the client was built from; a renewal changes its token
	// in place, anything else gives other Credentials.
	creds  *providerclient.Credentials
	client client.Client
	// namespace is the tenant namespace.
	namespace string
}

// provider returns the client of fc's provider, built from the peer's
// Credentials and kept until they change. It returns errNoCredentials when
// there are none.
func (r *Reconciler) provider(ctx context.Context, fc *offloadv1alpha1.ForeignCluster) (*provider, error) {
	if r.Providers == nil {
		r.Providers = &providerclient.Set{Reader: r.Reader, Namespace: r.Namespace}
	}
	creds, err := r.Providers.Get(ctx, fc)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	p := r.providers[fc.Name]
	r.mu.Unlock()
	if p != nil && p.creds == creds {
		return p, nil
	}
	p, err = newProvider(fc.Name, creds, r.Client.Scheme())
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	if r.providers == nil {
		r.providers = map[string]*provider{}
	}
	r.providers[fc.Name] = p
	r.mu.Unlock()
	return p, nil
}

// newProvider builds a client of the tenant namespace from creds. The
// client knows only RemoteNamespaces, so it needs no discovery.
func newProvider(name string, creds *providerclient.Credentials, scheme *runtime.Scheme) (*provider, error) {
	cfg := creds.Config()
	cfg.Timeout = providerTimeout
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(offloadv1alpha1.GroupVersion.WithKind("RemoteNamespace"), meta.RESTScopeNamespace)
	c, err := client.New(cfg, client.Options{Scheme: scheme, Mapper: mapper})
	if err != nil {
		return nil, fmt.Errorf("creating the client of peer %s: %w", name, err)
	}
	return &provider{creds: creds, client: c, namespace: creds.Namespace}, nil
}
