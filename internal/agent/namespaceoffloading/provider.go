package namespaceoffloading

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// providerTimeout bounds every request to a provider, so that one that
// does not answer holds a reconciliation for no longer than that.
const providerTimeout = 10 * time.Second

// errNoCredentials: the peer has no kubeconfig Secret (any more).
var errNoCredentials = errors.New("no credentials")

// provider is a client of one peer's API server, limited to the tenant
// namespace the consumer has there.
type provider struct {
	// key is what the client was built from.
	key    [sha256.Size]byte
	client client.Client
	// namespace is the tenant namespace.
	namespace string
}

// provider returns the client of fc's provider, built from its kubeconfig
// Secret and kept until the Secret changes (the agent renews the token in
// it). It returns errNoCredentials when there is no Secret.
func (r *Reconciler) provider(ctx context.Context, fc *offloadv1alpha1.ForeignCluster) (*provider, error) {
	var secret corev1.Secret
	err := r.Reader.Get(ctx, types.NamespacedName{Namespace: r.Namespace, Name: peering.PeerKubeconfigSecretName(fc.Name)}, &secret)
	if apierrors.IsNotFound(err) {
		return nil, errNoCredentials
	}
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig Secret of peer %s: %w", fc.Name, err)
	}
	kubeconfig := secret.Data[peering.PeerKubeconfigKey]
	if len(kubeconfig) == 0 {
		return nil, errNoCredentials
	}
	key := sha256.Sum256(append([]byte(string(fc.UID)+"\x00"), kubeconfig...))
	r.mu.Lock()
	p := r.providers[fc.Name]
	r.mu.Unlock()
	if p != nil && p.key == key {
		return p, nil
	}
	p, err = newProvider(fc.Name, kubeconfig, r.Client.Scheme())
	if err != nil {
		return nil, err
	}
	p.key = key
	r.mu.Lock()
	if r.providers == nil {
		r.providers = map[string]*provider{}
	}
	r.providers[fc.Name] = p
	r.mu.Unlock()
	return p, nil
}

// newProvider builds a client from a kubeconfig whose context namespace is
// the tenant namespace. The client
// knows only RemoteNamespaces, so it needs no discovery.
func newProvider(name string, kubeconfig []byte, scheme *runtime.Scheme) (*provider, error) {
	cfg, namespace, err := peering.TenantConfig(name, kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = providerTimeout
	mapper := meta.NewDefaultRESTMapper(nil)
	mapper.Add(offloadv1alpha1.GroupVersion.WithKind("RemoteNamespace"), meta.RESTScopeNamespace)
	c, err := client.New(cfg, client.Options{Scheme: scheme, Mapper: mapper})
	if err != nil {
		return nil, fmt.Errorf("creating the client of peer %s: %w", name, err)
	}
	return &provider{client: c, namespace: namespace}, nil
}
