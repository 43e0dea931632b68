// Package ipam picks this cluster's view of a peer's pod CIDRs: always a
// free block of the same size from this cluster's remap pools, never the
// peer's real range, so what a peer announces can only ever be routed here
// as a range this cluster set aside for views. It is pure: the allocations
// it must respect come from the caller (the Tunnels, which persist them
// across restarts).
package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Space is what a cluster's views must stay clear of, and where remapped
// views come from.
type Space struct {
	// Pools are the remap pools: where every view comes from.
	Pools []netip.Prefix
	// Reserved must never be used by a view: this cluster's pod, service
	// and node CIDRs, and the ranges the chart reserves.
	Reserved []netip.Prefix
	// Taken are the views already allocated to peers.
	Taken []netip.Prefix
}

// Validate says what is wrong with the pools and reserved ranges.
func (s Space) Validate() error {
	var errs []error
	if len(s.Pools) == 0 {
		errs = append(errs, errors.New("no remap pool is set, and every peer's pod CIDR is seen through a block of one: set network.remapPools, such as 10.64.0.0/12"))
	}
	for _, p := range s.Pools {
		if !p.IsValid() || !p.Addr().Is4() || p != p.Masked() {
			errs = append(errs, fmt.Errorf("remap pool %v is not an IPv4 network address", p))
		}
	}
	for i, p := range s.Pools {
		for _, q := range s.Pools[:i] {
			if p.IsValid() && q.IsValid() && p.Overlaps(q) {
				errs = append(errs, fmt.Errorf("remap pools %v and %v overlap", q, p))
			}
		}
	}
	for _, r := range s.Reserved {
		if !r.IsValid() {
			errs = append(errs, fmt.Errorf("reserved range %v is not a CIDR", r))
		}
	}
	return errors.Join(errs...)
}

// View returns the view of the peer's real CIDR: the first block of its
// size in the pools that overlaps nothing reserved or taken. The real
// range is never its own view, even when it clashes with nothing known
// here: this cluster cannot know every range its hosts use (node networks,
// DNS upstreams, a VPN), and a peer's range routed as itself could steer
// traffic meant for one of them.
func (s Space) View(real netip.Prefix) (netip.Prefix, error) {
	if !real.IsValid() || !real.Addr().Is4() {
		return netip.Prefix{}, fmt.Errorf("the peer's pod CIDR %v is not an IPv4 CIDR", real)
	}
	real = real.Masked()
	for _, pool := range s.Pools {
		if pool.Bits() > real.Bits() {
			continue
		}
		for b := netip.PrefixFrom(pool.Masked().Addr(), real.Bits()); pool.Contains(b.Addr()); {
			if s.free(b) {
				return b, nil
			}
			next, ok := nextBlock(b)
			if !ok {
				break
			}
			b = next
		}
	}
	return netip.Prefix{}, fmt.Errorf("no free /%d is left in the remap pools %s for the peer's pod CIDR %v: add a pool (install --set network.remapPools=…) or free one by unpeering",
		real.Bits(), Join(s.Pools), real)
}

// InPools tells whether v lies inside one of the remap pools, as every
// view must.
func (s Space) InPools(v netip.Prefix) bool {
	return within(v.Masked(), s.Pools)
}

// free tells whether b overlaps nothing reserved or taken.
func (s Space) free(b netip.Prefix) bool {
	_, clash := s.Clash(b)
	return !clash
}

// Clash returns the first reserved or taken range that b overlaps.
func (s Space) Clash(b netip.Prefix) (netip.Prefix, bool) {
	for _, r := range slices.Concat(s.Reserved, s.Taken) {
		if r.IsValid() && r.Overlaps(b) {
			return r, true
		}
	}
	return netip.Prefix{}, false
}

// nextBlock is the block of b's size right after b.
func nextBlock(b netip.Prefix) (netip.Prefix, bool) {
	a := b.Addr().As4()
	n := uint64(a[0])<<24 | uint64(a[1])<<16 | uint64(a[2])<<8 | uint64(a[3])
	n += 1 << (32 - b.Bits())
	if n > 0xffffffff {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), b.Bits()), true
}

// Views returns the views of every real CIDR of a peer, each taken before
// the next is picked.
func (s Space) Views(reals []netip.Prefix) ([]netip.Prefix, error) {
	s.Taken = slices.Clone(s.Taken)
	var out []netip.Prefix
	for _, r := range reals {
		v, err := s.View(r)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
		s.Taken = append(s.Taken, v)
	}
	return out, nil
}

// ParsePrefixes parses CIDRs, naming the first bad one.
func ParsePrefixes(what string, cidrs []string) ([]netip.Prefix, error) {
	out := make([]netip.Prefix, 0, len(cidrs))
	for _, c := range cidrs {
		p, err := netip.ParsePrefix(strings.TrimSpace(c))
		if err != nil {
			return nil, fmt.Errorf("%s %q is not a CIDR: %w", what, c, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// CanonicalCIDRs masks, sorts and de-duplicates CIDRs, dropping those that
// do not parse.
func CanonicalCIDRs(cidrs []string) []string {
	out := make([]string, 0, len(cidrs))
	for _, c := range cidrs {
		if p, err := netip.ParsePrefix(c); err == nil {
			out = append(out, p.Masked().String())
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Join is "A, B", or "(none)".
func Join(ps []netip.Prefix) string {
	if len(ps) == 0 {
		return "(none)"
	}
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ", ")
}
