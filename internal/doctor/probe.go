package doctor

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"path"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"

	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// hostOf returns the host of a URL (https://host:port/...) or of an
// address (host, host:port, [v6]:port), without brackets.
func hostOf(addr string) string {
	if strings.Contains(addr, "://") {
		if u, err := url.Parse(addr); err == nil {
			return u.Hostname()
		}
		return ""
	}
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return strings.Trim(addr, "[]")
}

// isClusterInternal reports whether host is a Service DNS name, which only
// resolves inside its cluster: NAME.NS.svc or NAME.NS.svc.cluster.local.
func isClusterInternal(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	return strings.HasSuffix(h, ".svc") || strings.Contains(h, ".svc.")
}

// probeTLS opens a TCP connection to the host and port of rawURL and
// completes a TLS handshake, within timeout. It sends nothing else: no
// request, no token. The certificate is not checked, since only
// reachability is in question here (peers check it against their pin).
func probeTLS(ctx context.Context, rawURL string, timeout time.Duration) error {
	host, port, ok := peering.SplitServer(rawURL)
	if !ok {
		return fmt.Errorf("%q is not a URL with a host", rawURL)
	}
	addr := net.JoinHostPort(host, port)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := dialRefusedAgain(ctx, addr)
	if err != nil {
		return fmt.Errorf("no TCP connection: %w", err)
	}
	defer conn.Close()
	// A reachability probe that sends nothing: peers verify the pinned CA.
	tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12})
	if err := tc.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("TCP connection, but no TLS handshake: %w", err)
	}
	return tc.Close()
}

// dialRefusedAgain dials addr, again every half second while the
// connection is refused, until ctx ends: right after an install or an
// upgrade, a NodePort or a load balancer refuses until its proxy has
// caught up with the new endpoint.
func dialRefusedAgain(ctx context.Context, addr string) (net.Conn, error) {
	for {
		conn, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
			return conn, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// errNoDate means a server answered without a usable Date header.
var errNoDate = errors.New("the answer has no Date header")

// clockOffset is how far ahead of the local clock a server's clock is,
// read from the Date header of one answer. The header has whole seconds,
// so the offset is good to about a second, plus half the round trip.
func clockOffset(date string, sent, received time.Time) (time.Duration, error) {
	t, err := http.ParseTime(date)
	if err != nil {
		return 0, errNoDate
	}
	// The header truncates to the second: the server's time was within
	// the second after it. Compare with the middle of the round trip.
	mid := sent.Add(received.Sub(sent) / 2)
	return t.Add(500 * time.Millisecond).Sub(mid), nil
}

// dateOffset sends req with hc and returns the clock offset of the server
// that answered.
func dateOffset(hc *http.Client, req *http.Request) (time.Duration, error) {
	sent := time.Now()
	resp, err := hc.Do(req)
	if ue := (*url.Error)(nil); errors.As(err, &ue) {
		// The URL is in the message already; say what went wrong.
		return 0, ue.Err
	}
	if err != nil {
		return 0, err
	}
	received := time.Now()
	resp.Body.Close()
	return clockOffset(resp.Header.Get("Date"), sent, received)
}

// peerClockOffset sends an unauthenticated GET to /healthz of a peer's
// auth service and returns the offset of its clock. It carries no
// credentials, and checks the server against the peer's pinned CA
// (caCertHash), as the agent does, so that the clock read is the peer's.
func peerClockOffset(ctx context.Context, authURL, caCertHash string, timeout time.Duration) (time.Duration, error) {
	u, err := url.Parse(authURL)
	if err != nil || u.Host == "" {
		return 0, fmt.Errorf("auth URL %q is not a URL", authURL)
	}
	u.Path, u.RawQuery, u.User = "/healthz", "", nil
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, err
	}
	hc := &http.Client{
		Timeout:   timeout,
		Transport: &http.Transport{TLSClientConfig: peering.PinnedTLSConfig(caCertHash)},
		// A redirect could lead anywhere; the first answer has the Date.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	defer hc.CloseIdleConnections()
	return dateOffset(hc, req)
}

// apiServerClockOffset asks this cluster's API server for /version with
// the kubeconfig's credentials and returns the offset of its clock.
func apiServerClockOffset(ctx context.Context, cfg *rest.Config, timeout time.Duration) (time.Duration, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return 0, fmt.Errorf("building a client for the API server: %w", err)
	}
	host := cfg.Host
	if !strings.Contains(host, "://") {
		host = "https://" + host
	}
	u, err := url.Parse(host)
	if err != nil {
		return 0, fmt.Errorf("the kubeconfig's server %q is not a URL: %w", cfg.Host, err)
	}
	u.Path = path.Join("/", u.Path, "version")
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return 0, err
	}
	return dateOffset(hc, req)
}
