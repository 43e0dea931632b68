package foreigncluster

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/kubectl-offload/kubectl-offload/internal/peer"
)

// maxResponseBytes bounds what the agent reads from an auth service.
const maxResponseBytes = 1 << 20

// PinError means the auth server's certificate chain does not match the
// pinned CA hash. The TLS handshake fails with it before any request is sent.
type PinError struct {
	// Reason says what did not match.
	Reason string
}

// Error returns the reason.
func (e *PinError) Error() string { return e.Reason }

// PinnedTLSConfig returns a client TLS configuration that trusts no system
// root: it accepts a server only when a certificate of its chain is a CA
// whose peer.CACertHash is caCertHash and the leaf verifies against that CA
// as the only root. Host names are not checked, kubeadm style: the pin is
// the identity.
func PinnedTLSConfig(caCertHash string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The standard verification is replaced, not skipped: VerifyConnection
		// runs on every handshake, resumed ones included.
		InsecureSkipVerify: true, //nolint:gosec // see VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			return VerifyPinnedChain(cs.PeerCertificates, caCertHash)
		},
	}
}

// VerifyPinnedChain checks a server's chain, leaf first, against the pin
// caCertHash. It returns a *PinError when it does not match.
func VerifyPinnedChain(chain []*x509.Certificate, caCertHash string) error {
	if len(chain) == 0 {
		return &PinError{Reason: "the server presented no certificate"}
	}
	leaf := chain[0]
	intermediates := x509.NewCertPool()
	for _, c := range chain[1:] {
		intermediates.AddCert(c)
	}
	pinnedFound := false
	var verifyErr error
	for _, c := range chain {
		if !c.IsCA || !c.BasicConstraintsValid {
			continue
		}
		hash, err := peer.CACertHash(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}))
		if err != nil || hash != caCertHash {
			continue
		}
		pinnedFound = true
		roots := x509.NewCertPool()
		roots.AddCert(c)
		_, verifyErr = leaf.Verify(x509.VerifyOptions{
			Roots: roots, Intermediates: intermediates,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		})
		if verifyErr == nil {
			return nil
		}
	}
	if pinnedFound {
		return &PinError{Reason: fmt.Sprintf("the server's certificate is not signed by the pinned CA: %v", verifyErr)}
	}
	return &PinError{Reason: fmt.Sprintf("no CA in the server's certificate chain has hash %s", caCertHash)}
}

// AuthError is an error answer of the auth service: its JSON body
// {"reason", "message"} and HTTP status.
type AuthError struct {
	Status  int
	Reason  string
	Message string
}

// Error returns the reason and the message.
func (e *AuthError) Error() string { return e.Reason + ": " + e.Message }

// authClient talks to one provider's auth service.
type authClient struct {
	baseURL string
	http    *http.Client
}

// newAuthClient returns a client for the auth service at authURL, pinned to caCertHash.
func newAuthClient(authURL, caCertHash string, timeout time.Duration) *authClient {
	return &authClient{
		baseURL: strings.TrimSuffix(authURL, "/"),
		http: &http.Client{
			Timeout: timeout,
			Transport: &http.Transport{
				TLSClientConfig:     PinnedTLSConfig(caCertHash),
				TLSHandshakeTimeout: timeout,
				DisableKeepAlives:   true,
				Proxy:               http.ProxyFromEnvironment,
			},
			// A redirect could carry the token to another endpoint.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}
}

// Peer exchanges a token for credentials. It returns an *AuthError when the
// service answers with an error, and a *PinError (wrapped) when the server
// is not the pinned one.
func (c *authClient) Peer(ctx context.Context, req peer.PeerRequest) (*peer.PeerResponse, error) {
	var out peer.PeerResponse
	if err := c.post(ctx, peer.PeerPath, "", req, &out); err != nil {
		return nil, err
	}
	return &out, checkCredentials(out.Credentials)
}

// Refresh exchanges the current credentials, token, for new ones.
func (c *authClient) Refresh(ctx context.Context, token, clusterID string) (*peer.PeerResponse, error) {
	var out peer.PeerResponse
	if err := c.post(ctx, peer.RefreshPath, token, peer.RefreshRequest{ClusterID: clusterID}, &out); err != nil {
		return nil, err
	}
	return &out, checkCredentials(out.Credentials)
}

// Unpeer asks the provider to remove this cluster's tenant; token is the
// current credentials, which stop working.
func (c *authClient) Unpeer(ctx context.Context, token, clusterID string) error {
	return c.post(ctx, peer.UnpeerPath, token, peer.RefreshRequest{ClusterID: clusterID}, nil)
}

func checkCredentials(c peer.Credentials) error {
	if c.Token == "" || c.APIServerURL == "" || c.TenantNamespace == "" {
		return errors.New("the auth service answered without complete credentials")
	}
	return nil
}

// post sends in as JSON to path, with bearer as the bearer token when set,
// and decodes a 200 answer into out when it is not nil.
func (c *authClient) post(ctx context.Context, path, bearer string, in, out any) error {
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.baseURL+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("building the request: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	if bearer != "" {
		hreq.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := c.http.Do(hreq)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return fmt.Errorf("reading the answer of %s: %w", c.baseURL, err)
	}
	if resp.StatusCode != http.StatusOK {
		e := &AuthError{Status: resp.StatusCode}
		if json.Unmarshal(data, e) != nil || e.Reason == "" {
			e.Reason = "UnexpectedResponse"
			e.Message = fmt.Sprintf("the auth service answered %s without a peering error: is --auth-url the provider's auth service?", resp.Status)
		}
		return e
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decoding the answer of the auth service: %w", err)
	}
	return nil
}
