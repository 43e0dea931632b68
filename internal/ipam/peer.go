package ipam

import (
	"errors"
	"fmt"
	"net/netip"
)

// What a peer may announce as its pod CIDRs. A peer's CIDRs become routes
// and filter rules on this cluster's nodes, so they are hostile input: the
// other cluster is not under this one's control.
var (
	// DefaultPeerRanges are the private ranges a peer's pod CIDRs must lie
	// within unless the admin sets others: RFC 1918 and RFC 6598 (shared
	// address space, which k3s and many CNIs use).
	DefaultPeerRanges = []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("172.16.0.0/12"),
		netip.MustParsePrefix("192.168.0.0/16"),
		netip.MustParsePrefix("100.64.0.0/10"),
	}
	// NeverViews are ranges no view may use whatever the admin allows:
	// "this network", loopback, link-local (cloud metadata lives there),
	// multicast and the reserved class E. A peer's CIDR overlapping them
	// is remapped when the admin allowed it, and refused otherwise.
	NeverViews = []netip.Prefix{
		netip.MustParsePrefix("0.0.0.0/8"),
		netip.MustParsePrefix("127.0.0.0/8"),
		netip.MustParsePrefix("169.254.0.0/16"),
		netip.MustParsePrefix("224.0.0.0/4"),
		netip.MustParsePrefix("240.0.0.0/4"),
	}
)

const (
	// MaxPeerCIDRs is how many pod CIDRs a peer may announce.
	MaxPeerCIDRs = 8
	// MinPeerCIDRBits and MaxPeerCIDRBits bound the size of each: at most
	// a /12 (a million addresses, more than any pod network uses), at
	// least a /28.
	MinPeerCIDRBits = 12
	MaxPeerCIDRBits = 28
)

// PeerRanges is what a peer's pod CIDRs must satisfy before they get a
// view here.
type PeerRanges struct {
	// Allowed are the ranges each CIDR must lie within; empty means
	// DefaultPeerRanges.
	Allowed []netip.Prefix
}

// Check says why reals may not be a peer's pod CIDRs, naming each bad one,
// or returns nil. It checks the form, the count, the size and the ranges;
// what the CIDRs overlap here is for View, which remaps them.
func (r PeerRanges) Check(reals []string) error {
	allowed := r.Allowed
	if len(allowed) == 0 {
		allowed = DefaultPeerRanges
	}
	if len(reals) == 0 {
		return errors.New("no pod CIDR announced")
	}
	if len(reals) > MaxPeerCIDRs {
		return fmt.Errorf("%d pod CIDRs announced, at most %d are accepted", len(reals), MaxPeerCIDRs)
	}
	var errs []error
	for _, s := range reals {
		p, err := netip.ParsePrefix(s)
		switch {
		case err != nil || !p.Addr().Is4():
			errs = append(errs, fmt.Errorf("%q is not an IPv4 CIDR", s))
		case p.Bits() < MinPeerCIDRBits || p.Bits() > MaxPeerCIDRBits:
			errs = append(errs, fmt.Errorf("%s is a /%d: a pod CIDR must be between a /%d and a /%d", p.Masked(), p.Bits(), MinPeerCIDRBits, MaxPeerCIDRBits))
		case !within(p.Masked(), allowed):
			errs = append(errs, fmt.Errorf("%s is outside the private ranges this cluster accepts from peers (%s; the chart's network.peerRanges sets them)", p.Masked(), Join(allowed)))
		}
	}
	return errors.Join(errs...)
}

// within tells whether p lies inside one of ranges.
func within(p netip.Prefix, ranges []netip.Prefix) bool {
	for _, r := range ranges {
		if r.Bits() <= p.Bits() && r.Contains(p.Addr()) {
			return true
		}
	}
	return false
}
