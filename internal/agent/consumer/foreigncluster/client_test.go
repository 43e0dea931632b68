package foreigncluster

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/pki"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// newCA returns an auth CA and its pin.
func newCA(t *testing.T) (*pki.CA, string) {
	t.Helper()
	ca, err := pki.NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	hash, err := peering.CACertHash(ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	return ca, hash
}

// servingCert issues a certificate for a host name the client never dials,
// to show that host names are not checked.
func servingCert(t *testing.T, ca *pki.CA) *tls.Certificate {
	t.Helper()
	cert, err := ca.IssueServingCert([]string{"auth.provider.example"}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return cert
}

// tlsServer starts an HTTPS server presenting cert and counts the requests
// that reach handler.
func tlsServer(t *testing.T, cert *tls.Certificate, handler http.HandlerFunc) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var requests atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		handler(w, r)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{*cert}}
	srv.Config.ErrorLog = nil
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, &requests
}

func ok(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }

func TestThePinnedClientTrustsOnlyTheServerThePinnedCASigned(t *testing.T) {
	pinnedCA, pin := newCA(t)
	otherCA, _ := newCA(t)
	pinnedLeaf, otherLeaf := servingCert(t, pinnedCA), servingCert(t, otherCA)
	tests := []struct {
		name    string
		cert    *tls.Certificate
		wantErr string // "" when the server is trusted
	}{
		{name: "a server whose certificate the pinned CA signed is trusted, whatever its host name", cert: pinnedLeaf},
		{name: "a server of another CA is refused", cert: otherLeaf, wantErr: "no CA in the server's certificate chain has hash"},
		{
			name:    "a server that presents the pinned CA with a leaf another CA signed is refused",
			cert:    &tls.Certificate{Certificate: [][]byte{otherLeaf.Certificate[0], pinnedCA.Cert.Raw}, PrivateKey: otherLeaf.PrivateKey},
			wantErr: "not signed by the pinned CA",
		},
		{
			name:    "a server that presents only its leaf is refused, since the pin names a CA",
			cert:    &tls.Certificate{Certificate: [][]byte{pinnedLeaf.Certificate[0]}, PrivateKey: pinnedLeaf.PrivateKey},
			wantErr: "no CA in the server's certificate chain",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv, requests := tlsServer(t, tt.cert, ok)
			c := peering.NewClient(srv.URL, pin, 5*time.Second)
			_, err := c.Peer(context.Background(), peering.PeerRequest{Token: "abc123.0123456789abcdef"})
			var pinErr *peering.PinError
			if tt.wantErr == "" {
				var authErr *peering.Error
				if !errors.As(err, &authErr) || authErr.Status != http.StatusTeapot {
					t.Fatalf("Peer = %v, want the server's answer", err)
				}
				if requests.Load() != 1 {
					t.Errorf("the server got %d requests, want 1", requests.Load())
				}
				return
			}
			if !errors.As(err, &pinErr) || !strings.Contains(pinErr.Reason, tt.wantErr) {
				t.Fatalf("Peer = %v, want a PinError saying %q", err, tt.wantErr)
			}
			if n := requests.Load(); n != 0 {
				t.Errorf("the handler saw %d requests: the token left the consumer", n)
			}
		})
	}
}

func TestThePinnedClientDoesNotFollowRedirects(t *testing.T) {
	ca, pin := newCA(t)
	srv, requests := tlsServer(t, servingCert(t, ca), func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
	})
	_, err := peering.NewClient(srv.URL, pin, 5*time.Second).Peer(context.Background(), peering.PeerRequest{Token: "abc123.0123456789abcdef"})
	var authErr *peering.Error
	if !errors.As(err, &authErr) || authErr.Status != http.StatusTemporaryRedirect {
		t.Fatalf("Peer = %v, want the redirect as an error", err)
	}
	if requests.Load() != 1 {
		t.Errorf("the server got %d requests, want 1", requests.Load())
	}
}
