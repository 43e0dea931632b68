package peering

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// maxResponseBytes bounds what the client reads from an auth service.
const maxResponseBytes = 1 << 20

// Client talks to one provider's auth service over TLS pinned to its CA.
type Client struct {
	baseURL string
	http    *http.Client
}

// NewClient returns a client for the auth service at authURL, pinned to
// caCertHash; timeout bounds each request.
func NewClient(authURL, caCertHash string, timeout time.Duration) *Client {
	return &Client{
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

// Peer exchanges a token for credentials. It returns an *Error when the
// service answers with an error, and a *PinError (wrapped) when the server
// is not the pinned one.
func (c *Client) Peer(ctx context.Context, req PeerRequest) (*PeerResponse, error) {
	var out PeerResponse
	if err := c.post(ctx, PeerPath, "", req, &out); err != nil {
		return nil, err
	}
	return &out, checkCredentials(out.Credentials)
}

// Refresh exchanges the current credentials, token, for new ones.
func (c *Client) Refresh(ctx context.Context, token, clusterID string) (*PeerResponse, error) {
	var out PeerResponse
	if err := c.post(ctx, RefreshPath, token, RefreshRequest{ClusterID: clusterID}, &out); err != nil {
		return nil, err
	}
	return &out, checkCredentials(out.Credentials)
}

// Unpeer asks the provider to remove this cluster's tenant; token is the
// current credentials, which stop working.
func (c *Client) Unpeer(ctx context.Context, token, clusterID string) error {
	return c.post(ctx, UnpeerPath, token, RefreshRequest{ClusterID: clusterID}, nil)
}

func checkCredentials(c Credentials) error {
	if c.Token == "" || c.APIServerURL == "" || c.TenantNamespace == "" {
		return errors.New("the auth service answered without complete credentials")
	}
	return nil
}

// post sends in as JSON to path, with bearer as the bearer token when set,
// and decodes a 200 answer into out when it is not nil.
func (c *Client) post(ctx context.Context, path, bearer string, in, out any) error {
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
		return readError(resp, data)
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decoding the answer of the auth service: %w", err)
	}
	return nil
}
