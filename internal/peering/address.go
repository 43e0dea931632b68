package peering

import (
	"net/netip"
	"net/url"
	"strings"
)

// Addresses a cluster advertises to its peers.

// SplitServer returns the host and port of a kubeconfig server address
// ("https://h:p", "h:p" or "https://h"; the port defaults from the scheme).
func SplitServer(server string) (host, port string, ok bool) {
	if !strings.Contains(server, "://") {
		server = "https://" + server
	}
	u, err := url.Parse(server)
	if err != nil || u.Hostname() == "" {
		return "", "", false
	}
	port = u.Port()
	if port == "" {
		port = "443"
		if u.Scheme == "http" {
			port = "80"
		}
	}
	return u.Hostname(), port, true
}

// IsLoopbackHost reports whether host names whatever machine uses it:
// localhost, a loopback address, or the unspecified address. A peer that
// dials it reaches itself; install and doctor flag such addresses.
func IsLoopbackHost(host string) bool {
	h := strings.ToLower(strings.TrimSuffix(host, "."))
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && (a.IsLoopback() || a.IsUnspecified())
}
