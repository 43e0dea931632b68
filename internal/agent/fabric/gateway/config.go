package gateway

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"strconv"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Role says which end of the tunnel a gateway is.
type Role string

const (
	// RoleServer is the provider's gateway: it listens and never dials.
	RoleServer Role = "server"
	// RoleClient is the consumer's gateway: it dials the server's endpoint,
	// so it works from behind NAT.
	RoleClient Role = "client"
)

// Implementation selects the WireGuard device.
type Implementation string

const (
	// ImplementationAuto uses the kernel device where the module exists and
	// embedded wireguard-go otherwise.
	ImplementationAuto Implementation = "auto"
	// ImplementationKernel is the kernel's WireGuard device.
	ImplementationKernel Implementation = "kernel"
	// ImplementationUserspace is embedded wireguard-go on a TUN device.
	ImplementationUserspace Implementation = "userspace"
)

// The tunnel's own addresses. Every gateway runs in its own network
// namespace (its pod) with one peer, so the same pair serves every tunnel.
var (
	tunnelPrefix     = netip.MustParsePrefix("169.254.77.0/30")
	serverTunnelAddr = netip.MustParseAddr("169.254.77.1")
	clientTunnelAddr = netip.MustParseAddr("169.254.77.2")
)

const (
	// DefaultListenPort is the server's UDP port.
	DefaultListenPort = 51820
	// DefaultKeepaliveSeconds keeps a NAT binding open and lets a restarted
	// server be found again within one interval.
	DefaultKeepaliveSeconds = 25
	// tunnelOverhead is what WireGuard over IPv4 or IPv6 adds to a packet,
	// rounded up as wg-quick does.
	tunnelOverhead = 80
	// minMTU is IPv4's minimum datagram size: the pod networks are IPv4.
	minMTU = 576
)

// Mapping is how one of the peer's real pod CIDRs is seen from this
// cluster: as a block of the same size from this cluster's remap pools.
// Peerings made before views were always remapped may still hold a view
// equal to its real CIDR until their Tunnel is rendered again.
type Mapping struct {
	Real netip.Prefix `json:"real"`
	View netip.Prefix `json:"view"`
}

// Translated tells whether packets of this mapping are rewritten.
func (m Mapping) Translated() bool { return m.Real != m.View }

// Config is everything a gateway needs. The controller renders it into the
// gateway's Secret as JSON; the private key stays in its own file.
type Config struct {
	// Role is server (provider) or client (consumer).
	Role Role `json:"role"`
	// Interface names the WireGuard device. Userspace devices publish a
	// UAPI socket under /var/run/wireguard, shared across network
	// namespaces on one host, so the name must be unique there.
	Interface string `json:"interface"`
	// Implementation is auto, kernel or userspace.
	Implementation Implementation `json:"implementation"`
	// PrivateKeyFile holds this gateway's base64 private key.
	PrivateKeyFile string `json:"privateKeyFile"`
	// ListenPort is the UDP port the server listens on (0 for the client:
	// any port).
	ListenPort int `json:"listenPort,omitempty"`
	// PeerPublicKey is the peer's base64 public key.
	PeerPublicKey string `json:"peerPublicKey"`
	// PeerEndpoint is host:port of the server; the client dials it. Empty
	// on the server, which learns the client's address from its packets.
	PeerEndpoint string `json:"peerEndpoint,omitempty"`
	// MTU of the tunnel device; 0 derives it from this side's path (the
	// egress MTU minus 80). Both sides should use the minimum of the two.
	MTU int `json:"mtu,omitempty"`
	// KeepaliveSeconds is the WireGuard persistent keepalive (0: default).
	KeepaliveSeconds int `json:"keepaliveSeconds,omitempty"`
	// LocalPodCIDRs are this cluster's real pod CIDRs.
	LocalPodCIDRs []netip.Prefix `json:"localPodCIDRs"`
	// Peer maps the peer's real pod CIDRs to this cluster's views of them.
	Peer []Mapping `json:"peer"`
	// AllowedDestinations are the local addresses the peer may open
	// connections to (the tenant filter); empty allows every local pod
	// address. The provider lists the pods of its consumer's twin
	// namespaces here.
	AllowedDestinations []netip.Prefix `json:"allowedDestinations,omitempty"`
	// Mirror, on the server only, is how the peer sees this cluster's own
	// pods: Real is a local pod CIDR, View the peer's view of it. A local
	// pod that calls a view (an address the consumer showed it, say) is
	// taken back to the real pod, and the callee sees the caller at its
	// view too, so offloaded pods reach each other at the addresses the
	// consumer shows. Only allowed pods may call, and be called, this way.
	Mirror []Mapping `json:"mirror,omitempty"`
	// PodIP is the gateway pod's own address, the source that traffic from
	// outside the pod CIDRs (nodes, hostNetwork pods) is translated to.
	// Empty: the address of the interface holding the default route.
	PodIP netip.Addr `json:"podIP,omitzero"`
}

// LoadConfig reads a Config written as JSON and validates it.
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the gateway configuration: %w", err)
	}
	c := &Config{}
	if err := json.Unmarshal(b, c); err != nil {
		return nil, fmt.Errorf("parsing the gateway configuration %s: %w", path, err)
	}
	c.Default()
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("invalid gateway configuration %s: %w", path, err)
	}
	return c, nil
}

// Default fills what was left empty.
func (c *Config) Default() {
	if c.Implementation == "" {
		c.Implementation = ImplementationAuto
	}
	if c.KeepaliveSeconds == 0 {
		c.KeepaliveSeconds = DefaultKeepaliveSeconds
	}
	if c.Role == RoleServer && c.ListenPort == 0 {
		c.ListenPort = DefaultListenPort
	}
}

// Validate says what is wrong with c, all at once.
func (c *Config) Validate() error {
	var errs []error
	switch c.Role {
	case RoleServer:
		if c.PeerEndpoint != "" {
			errs = append(errs, errors.New("peerEndpoint: the server never dials; leave it empty"))
		}
	case RoleClient:
		if _, _, err := splitEndpoint(c.PeerEndpoint); err != nil {
			errs = append(errs, fmt.Errorf("peerEndpoint: %w", err))
		}
	default:
		errs = append(errs, fmt.Errorf("role %q: use server or client", c.Role))
	}
	switch c.Implementation {
	case ImplementationAuto, ImplementationKernel, ImplementationUserspace:
	default:
		errs = append(errs, fmt.Errorf("implementation %q: use auto, kernel or userspace", c.Implementation))
	}
	if c.Interface == "" || len(c.Interface) > 15 {
		errs = append(errs, fmt.Errorf("interface %q: give a name of 1 to 15 characters", c.Interface))
	}
	if c.PrivateKeyFile == "" {
		errs = append(errs, errors.New("privateKeyFile is empty"))
	}
	if _, err := wgtypes.ParseKey(c.PeerPublicKey); err != nil {
		errs = append(errs, fmt.Errorf("peerPublicKey: %w", err))
	}
	if c.ListenPort < 0 || c.ListenPort > 65535 {
		errs = append(errs, fmt.Errorf("listenPort %d is not a port", c.ListenPort))
	}
	if c.MTU != 0 && (c.MTU < minMTU || c.MTU > 65535) {
		errs = append(errs, fmt.Errorf("mtu %d: give 0 (from the path) or %d to 65535", c.MTU, minMTU))
	}
	if c.KeepaliveSeconds < 0 || c.KeepaliveSeconds > 65535 {
		errs = append(errs, fmt.Errorf("keepaliveSeconds %d is out of range", c.KeepaliveSeconds))
	}
	errs = append(errs, c.validateAddresses()...)
	return errors.Join(errs...)
}

func (c *Config) validateAddresses() []error {
	var errs []error
	if len(c.LocalPodCIDRs) == 0 {
		errs = append(errs, errors.New("localPodCIDRs is empty"))
	}
	if len(c.Peer) == 0 {
		errs = append(errs, errors.New("peer has no pod CIDR"))
	}
	for _, p := range c.LocalPodCIDRs {
		if !p.IsValid() || !p.Addr().Is4() {
			errs = append(errs, fmt.Errorf("localPodCIDRs: %v is not an IPv4 CIDR", p))
		} else if p.Overlaps(tunnelPrefix) {
			errs = append(errs, fmt.Errorf("localPodCIDRs: %v overlaps the tunnel's own %v", p, tunnelPrefix))
		}
	}
	for i, m := range c.Peer {
		if !m.Real.IsValid() || !m.View.IsValid() || !m.Real.Addr().Is4() || !m.View.Addr().Is4() {
			errs = append(errs, fmt.Errorf("peer[%d]: real %v and view %v must be IPv4 CIDRs", i, m.Real, m.View))
			continue
		}
		if m.Real != m.Real.Masked() || m.View != m.View.Masked() {
			errs = append(errs, fmt.Errorf("peer[%d]: %v and %v must be network addresses", i, m.Real, m.View))
		}
		if m.Real.Bits() != m.View.Bits() {
			errs = append(errs, fmt.Errorf("peer[%d]: the view %v must be the size of the real CIDR %v", i, m.View, m.Real))
		}
		if m.View.Overlaps(tunnelPrefix) {
			errs = append(errs, fmt.Errorf("peer[%d]: the view %v overlaps the tunnel's own %v", i, m.View, tunnelPrefix))
		}
		for _, l := range c.LocalPodCIDRs {
			if l.IsValid() && m.View.Overlaps(l) {
				errs = append(errs, fmt.Errorf("peer[%d]: the view %v overlaps the local pod CIDR %v; pick a view from the remap pool", i, m.View, l))
			}
		}
		for j := range i {
			if c.Peer[j].View.IsValid() && m.View.Overlaps(c.Peer[j].View) {
				errs = append(errs, fmt.Errorf("peer[%d]: the view %v overlaps peer[%d]'s view %v", i, m.View, j, c.Peer[j].View))
			}
		}
	}
	errs = append(errs, c.validateMirror()...)
	for _, a := range c.AllowedDestinations {
		if !a.IsValid() || !within(a, c.LocalPodCIDRs) {
			errs = append(errs, fmt.Errorf("allowedDestinations: %v is not inside the local pod CIDRs", a))
		}
	}
	if c.PodIP.IsValid() && !c.PodIP.Is4() {
		errs = append(errs, fmt.Errorf("podIP %v is not an IPv4 address", c.PodIP))
	}
	return errs
}

// validateMirror checks the server's mirror: each view is of a whole local
// pod CIDR, of its size, and overlaps nothing else this gateway routes.
func (c *Config) validateMirror() []error {
	var errs []error
	if len(c.Mirror) > 0 && c.Role != RoleServer {
		errs = append(errs, errors.New("mirror: only the server mirrors its pods"))
	}
	for i, m := range c.Mirror {
		if !m.Real.IsValid() || !m.View.IsValid() || !m.Real.Addr().Is4() || !m.View.Addr().Is4() ||
			m.Real != m.Real.Masked() || m.View != m.View.Masked() || m.Real.Bits() != m.View.Bits() {
			errs = append(errs, fmt.Errorf("mirror[%d]: real %v and view %v must be IPv4 networks of the same size", i, m.Real, m.View))
			continue
		}
		if !slices.Contains(c.LocalPodCIDRs, m.Real) {
			errs = append(errs, fmt.Errorf("mirror[%d]: %v is not one of the local pod CIDRs", i, m.Real))
		}
		others := slices.Concat([]netip.Prefix{tunnelPrefix}, c.LocalPodCIDRs)
		for _, p := range c.Peer {
			others = append(others, p.View)
		}
		for _, o := range c.Mirror[:i] {
			others = append(others, o.View)
		}
		for _, o := range others {
			if o.IsValid() && m.View.Overlaps(o) {
				errs = append(errs, fmt.Errorf("mirror[%d]: the view %v overlaps %v, which this gateway routes otherwise", i, m.View, o))
			}
		}
	}
	return errs
}

// within tells whether p lies inside one of cidrs.
func within(p netip.Prefix, cidrs []netip.Prefix) bool {
	for _, c := range cidrs {
		if c.IsValid() && c.Bits() <= p.Bits() && c.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

// tunnelAddrs are this side's and the peer's tunnel addresses.
func (c *Config) tunnelAddrs() (local, peer netip.Addr) {
	if c.Role == RoleServer {
		return serverTunnelAddr, clientTunnelAddr
	}
	return clientTunnelAddr, serverTunnelAddr
}

// allowed is the tenant filter's set: AllowedDestinations, else every local
// pod CIDR.
func (c *Config) allowed() []netip.Prefix {
	if len(c.AllowedDestinations) > 0 {
		return c.AllowedDestinations
	}
	return c.LocalPodCIDRs
}

func splitEndpoint(ep string) (string, int, error) {
	host, port, err := net.SplitHostPort(ep)
	if err != nil {
		return "", 0, fmt.Errorf("%q is not host:port", ep)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return "", 0, fmt.Errorf("%q has no valid port", ep)
	}
	if host == "" {
		return "", 0, fmt.Errorf("%q has no host", ep)
	}
	return host, n, nil
}
