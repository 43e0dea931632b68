package namespaceoffloading

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/providerclient"
)

// errNoCredentials: the peer has no kubeconfig Secret (any more).
var errNoCredentials = providerclient.ErrNoCredentials

// provider is a client of one peer's API server, limited to the tenant
// namespace the consumer has there.
type provider struct {
	client client.Client
	// namespace is the tenant namespace.
	namespace string
}

// provider returns the client of fc's provider, the one its Credentials
// keep (providerclient.Credentials.TenantClient). It returns
// errNoCredentials when there are none.
func (r *Reconciler) provider(ctx context.Context, fc *offloadv1alpha1.ForeignCluster) (*provider, error) {
	if r.Providers == nil {
		r.Providers = &providerclient.Set{Reader: r.Reader, Namespace: r.Namespace}
	}
	creds, err := r.Providers.Get(ctx, fc)
	if err != nil {
		return nil, err
	}
	c, err := creds.TenantClient(r.Client.Scheme())
	if err != nil {
		return nil, err
	}
	return &provider{client: c, namespace: creds.Namespace}, nil
}
