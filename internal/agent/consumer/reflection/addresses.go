package reflection

import (
	"net/netip"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// Addresses translates pod addresses between a consumer and one provider
// when the network fabric connects them: each side sees the other's pod
// CIDRs through its own views. A nil *Addresses translates nothing, as
// when the peering has no networking (the clusters share a flat network).
//
// A peering with the fabric whose translation is not known yet, or whose
// tunnel is down, has Addresses that withhold: its pods show no address on
// the consumer, rather than one that means another pod there.
type Addresses struct {
	// Provider are the consumer's views of the provider's pod CIDRs.
	Provider []Mapping
	// Consumer are the provider's views of the consumer's pod CIDRs.
	Consumer []Mapping
	// Withhold says the peering has the network fabric but its pods are
	// not reachable by their view yet: no tunnel, no mappings, or a tunnel
	// that is down. ConsumerIP then gives no address.
	Withhold bool
}

// Mapping is one real CIDR and its view.
type Mapping struct{ Real, View netip.Prefix }

// AddressesOf reads the consumer's client Tunnel to a provider: its
// mappings (the consumer's views) and the provider's views of the
// consumer. Unparsable entries are skipped.
func AddressesOf(t *offloadv1alpha1.Tunnel) *Addresses {
	if t == nil {
		return nil
	}
	return &Addresses{Provider: mappings(t.Spec.Mappings), Consumer: mappings(t.Spec.PeerViews)}
}

func mappings(in []offloadv1alpha1.CIDRMapping) []Mapping {
	var out []Mapping
	for _, m := range in {
		r, err1 := netip.ParsePrefix(m.Real)
		v, err2 := netip.ParsePrefix(m.View)
		if err1 == nil && err2 == nil && r.Bits() == v.Bits() {
			out = append(out, Mapping{Real: r.Masked(), View: v.Masked()})
		}
	}
	return out
}

// ConsumerIP is a provider pod's address as the consumer sees it. An
// address the provider's pod CIDRs do not hold has none (""): the provider
// writes the remote pod's status, and an address it made up would point the
// consumer's Services at whatever has it on the consumer. While a withholds
// (Withhold), there is none either.
func (a *Addresses) ConsumerIP(providerIP string) string {
	if a == nil {
		return providerIP
	}
	if a.Withhold {
		return ""
	}
	if out, ok := translate(providerIP, a.Provider, false); ok {
		return out
	}
	return ""
}

// ProviderIP is an address of a consumer EndpointSlice as the provider
// can reach it: a consumer pod's, in the provider's view of the consumer;
// a pod offloaded to this provider (which the consumer sees in its view),
// as its real address there. Anything else (another provider's pod, a
// node) the provider cannot reach through this peering: false.
func (a *Addresses) ProviderIP(consumerAddr string) (string, bool) {
	if a == nil {
		return consumerAddr, true
	}
	if out, ok := translate(consumerAddr, a.Provider, true); ok {
		return out, true
	}
	if out, ok := translate(consumerAddr, a.Consumer, false); ok {
		return out, true
	}
	return "", false
}

// translate maps addr from a mapping's real CIDR to its view, or back
// (reverse), keeping the host part.
func translate(addr string, ms []Mapping, reverse bool) (string, bool) {
	ip, err := netip.ParseAddr(addr)
	if err != nil || !ip.Is4() {
		return "", false
	}
	for _, m := range ms {
		from, to := m.Real, m.View
		if reverse {
			from, to = m.View, m.Real
		}
		if !from.Contains(ip) {
			continue
		}
		a, t := ip.As4(), to.Addr().As4()
		var out [4]byte
		for i := range out {
			out[i] = t[i] | a[i]&hostMask(from.Bits(), i)
		}
		return netip.AddrFrom4(out).String(), true
	}
	return "", false
}

// hostMask is the host part of byte i of a /bits address.
func hostMask(bits, i int) byte {
	switch {
	case bits >= (i+1)*8:
		return 0
	case bits <= i*8:
		return 0xff
	default:
		return 0xff >> (bits - i*8)
	}
}
