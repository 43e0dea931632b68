// Package providerclient is, on the consumer, the one source of a
// provider's client configuration for every controller that talks to a
// provider (the virtual node and its reflection, namespace offloading).
//
// The credentials come from the peer's kubeconfig Secret, which the
// foreigncluster controller writes and renews. A Set reads that Secret and
// keeps one *Credentials per peer: a renewal (a new token and nothing else)
// updates the token in place, so every client built from Config uses the
// new one from its next request on; any other change (server, CA, tenant
// namespace, another ForeignCluster of the same name) gives new Credentials,
// which the callers see as a new Key and rebuild their clients for.
package providerclient

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/oauth2"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// ErrNoCredentials means the peer has no kubeconfig Secret (yet, or any more).
var ErrNoCredentials = errors.New("no credentials for the provider")

// Credentials are what a consumer connects to one provider with: the
// kubeconfig without its token, the token, which a renewal swaps in place,
// and the tenant namespace.
type Credentials struct {
	config *rest.Config
	// Namespace is the tenant namespace on the provider.
	Namespace string
	token     atomic.Pointer[string]
	key       string

	tenantOnce   sync.Once
	tenantClient client.Client
	tenantErr    error
}

// TenantTimeout bounds every request of TenantClient, so that a provider
// that does not answer holds a reconciliation for no longer than that.
const TenantTimeout = 10 * time.Second

// TenantClient returns the client of the kinds the consumer writes in its
// tenant namespace (RemoteNamespaces, NetworkPeerings), built once per
// Credentials: a renewal swaps the token in place, so it stays valid. It
// knows its kinds' scope and needs no discovery.
func (c *Credentials) TenantClient(scheme *runtime.Scheme) (client.Client, error) {
	c.tenantOnce.Do(func() {
		cfg := c.Config()
		cfg.Timeout = TenantTimeout
		mapper := meta.NewDefaultRESTMapper(nil)
		for _, kind := range []string{"RemoteNamespace", "NetworkPeering"} {
			mapper.Add(offloadv1alpha1.GroupVersion.WithKind(kind), meta.RESTScopeNamespace)
		}
		c.tenantClient, c.tenantErr = client.New(cfg, client.Options{Scheme: scheme, Mapper: mapper})
		if c.tenantErr != nil {
			c.tenantErr = fmt.Errorf("creating the client of the tenant namespace %s: %w", c.Namespace, c.tenantErr)
		}
	})
	return c.tenantClient, c.tenantErr
}

// Parse reads the kubeconfig of peer, whose context namespace is the
// tenant namespace. uid is the ForeignCluster's, so that a peer of the same
// name made again gets new Credentials.
func Parse(peer string, uid types.UID, kubeconfig []byte) (*Credentials, error) {
	cfg, namespace, err := peering.TenantConfig(peer, kubeconfig)
	if err != nil {
		return nil, err
	}
	token := cfg.BearerToken
	cfg.BearerToken = ""
	c := &Credentials{config: cfg, Namespace: namespace}
	c.token.Store(&token)
	c.key = string(uid) + "\x00" + cfg.Host + "\x00" + string(cfg.CAData) + "\x00" + string(cfg.CertData) + "\x00" + namespace
	return c, nil
}

// Key identifies everything but the token: clients built from Credentials
// with the same Key stay valid across renewals.
func (c *Credentials) Key() string { return c.key }

// Config returns a client configuration for the provider whose token is
// read from c at every request, so a renewal applies at once.
func (c *Credentials) Config() *rest.Config {
	cfg := rest.CopyConfig(c.config)
	if token := c.token.Load(); token != nil && *token != "" {
		cfg.WrapTransport = transport.TokenSourceWrapTransport(tokenSource{&c.token})
	}
	return cfg
}

// tokenSource serves the current token of Credentials.
type tokenSource struct{ token *atomic.Pointer[string] }

// Token returns the current token.
func (t tokenSource) Token() (*oauth2.Token, error) {
	s := t.token.Load()
	if s == nil {
		return nil, errors.New("no token")
	}
	return &oauth2.Token{AccessToken: *s}, nil
}

// Set keeps the Credentials of every peer of this cluster.
type Set struct {
	// Reader reads the kubeconfig Secrets. An uncached reader is right:
	// the agent may read Secrets only in its own namespace.
	Reader client.Reader
	// Namespace is the install namespace, where the Secrets are.
	Namespace string

	mu    sync.Mutex
	peers map[string]*Credentials
}

// Get returns the Credentials of fc's provider: the ones it returned
// before, with the token renewed in place, unless something else changed.
// It returns ErrNoCredentials when the peer has no kubeconfig Secret.
func (s *Set) Get(ctx context.Context, fc *offloadv1alpha1.ForeignCluster) (*Credentials, error) {
	var secret corev1.Secret
	err := s.Reader.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: peering.PeerKubeconfigSecretName(fc.Name)}, &secret)
	if apierrors.IsNotFound(err) {
		s.Forget(fc.Name)
		return nil, ErrNoCredentials
	}
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig Secret of peer %s: %w", fc.Name, err)
	}
	kubeconfig := secret.Data[peering.PeerKubeconfigKey]
	if len(kubeconfig) == 0 {
		s.Forget(fc.Name)
		return nil, ErrNoCredentials
	}
	fresh, err := Parse(fc.Name, fc.UID, kubeconfig)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if cur := s.peers[fc.Name]; cur != nil && cur.key == fresh.key {
		cur.token.Store(fresh.token.Load())
		return cur, nil
	}
	if s.peers == nil {
		s.peers = map[string]*Credentials{}
	}
	s.peers[fc.Name] = fresh
	return fresh, nil
}

// Forget drops the Credentials of peer name.
func (s *Set) Forget(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.peers, name)
}
