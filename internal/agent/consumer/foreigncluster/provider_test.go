package foreigncluster

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// renewedToken is the token the fake provider issues on /v1/refresh.
const renewedToken = "renewed-tenant-sa-token"

// providerCall is a call the fake provider got on /v1/refresh or /v1/unpeer.
type providerCall struct {
	path   string
	bearer string
	body   peering.RefreshRequest
}

// fakeProvider is a provider's auth service over TLS, signed by the CA that
// pin names. It grants credentials on /v1/peer, and records the calls to
// /v1/refresh and /v1/unpeer and answers them with the handlers set by
// answerRefresh and answerUnpeer.
type fakeProvider struct {
	srv *httptest.Server
	pin string

	mu      sync.Mutex
	calls   []providerCall
	refresh http.HandlerFunc
	unpeer  http.HandlerFunc
}

func newFakeProvider(t *testing.T, providerID string) *fakeProvider {
	t.Helper()
	ca, pin := newCA(t)
	p := &fakeProvider{pin: pin, refresh: refuse(http.StatusNotImplemented), unpeer: unpeered}
	p.srv, _ = tlsServer(t, servingCert(t, ca), func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == peering.PeerPath {
			var req peering.PeerRequest
			if json.NewDecoder(r.Body).Decode(&req) != nil {
				http.Error(w, "bad request", http.StatusBadRequest)
				return
			}
			grantCredentials(w, req, providerID)
			return
		}
		call := providerCall{path: r.URL.Path, bearer: strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")}
		if json.NewDecoder(r.Body).Decode(&call.body) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		p.mu.Lock()
		p.calls = append(p.calls, call)
		answer := map[string]http.HandlerFunc{peering.RefreshPath: p.refresh, peering.UnpeerPath: p.unpeer}[r.URL.Path]
		p.mu.Unlock()
		if answer == nil {
			http.NotFound(w, r)
			return
		}
		answer(w, r)
	})
	return p
}

func (p *fakeProvider) answerRefresh(h http.HandlerFunc) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.refresh = h
}

func (p *fakeProvider) answerUnpeer(h http.HandlerFunc) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.unpeer = h
}

// callsTo returns the calls the provider got on path.
func (p *fakeProvider) callsTo(path string) []providerCall {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []providerCall
	for _, c := range p.calls {
		if c.path == path {
			out = append(out, c)
		}
	}
	return out
}

// renew answers /v1/refresh with renewedToken, expiring at expiry.
func renew(expiry time.Time) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(peering.PeerResponse{Credentials: peering.Credentials{
			APIServerURL: providerAPIURL, CACert: "-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n", Token: renewedToken,
			ExpirationTimestamp: expiry, TenantNamespace: "tenant-consumer",
		}})
	}
}

// refuse answers with an auth service error of status.
func refuse(status int) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		peering.WriteError(w, &peering.Error{Reason: peering.ReasonUnauthorized, Message: "the credentials are not valid", Status: status})
	}
}

// unpeered answers /v1/unpeer: the tenant is gone.
func unpeered(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }

// newPeeredEnv returns a consumer whose ForeignCluster, returned by name,
// authenticated with the fake provider and holds credentials issued at
// issued and expiring at expiry, both whole seconds as the Secret keeps them.
func newPeeredEnv(t *testing.T, issued, expiry time.Time) (*consumerEnv, *fakeProvider, string) {
	t.Helper()
	e := newConsumerEnv(t)
	p := newFakeProvider(t, e.providerID)
	e.authURL, e.pin = p.srv.URL, p.pin
	name := e.peerWith(t, e.pin)
	if _, err := e.reconcile(t, name); err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	if c := authenticated(t, e.foreignCluster(t, name)); c.Status != metav1.ConditionTrue {
		t.Fatalf("Authenticated = %+v, want True", c)
	}
	s := e.secret(t, peering.PeerKubeconfigSecretName(name))
	s.Data[peering.PeerIssuedKey] = []byte(issued.UTC().Format(time.RFC3339))
	s.Data[peering.PeerExpirationKey] = []byte(expiry.UTC().Format(time.RFC3339))
	if err := e.c.Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	if n := len(p.callsTo(peering.RefreshPath)); n != 0 {
		t.Fatalf("the provider got %d refresh calls while peering", n)
	}
	return e, p, name
}

// kubeconfigToken returns the token of the kubeconfig Secret s.
func kubeconfigToken(t *testing.T, s *corev1.Secret) string {
	t.Helper()
	cfg, err := clientcmd.Load(s.Data[peering.PeerKubeconfigKey])
	if err != nil {
		t.Fatal(err)
	}
	return cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo].Token
}

// assertNoTokens fails when a condition of fc mentions a token.
func assertNoTokens(t *testing.T, fc *offloadv1alpha1.ForeignCluster) {
	t.Helper()
	for _, c := range fc.Status.Conditions {
		for _, token := range []string{testToken, testSecret, tenantSAToken, renewedToken} {
			if strings.Contains(c.Message, token) {
				t.Errorf("condition %s gives away a token: %q", c.Type, c.Message)
			}
		}
	}
}
