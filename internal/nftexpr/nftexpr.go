// Package nftexpr builds the nftables expressions that the gateway and the
// test harness program through netlink (github.com/google/nftables), so no
// nft binary is needed. Each function returns the expressions of one match
// or action of an IPv4 rule, to be appended into a rule's Exprs.
package nftexpr

import (
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// Offsets of the IPv4 header's addresses, for MatchPrefix and Lookup.
const (
	Source      uint32 = 12
	Destination uint32 = 16
)

// MatchPrefix matches the IPv4 address at offset (Source or Destination)
// against prefix p.
func MatchPrefix(offset uint32, p netip.Prefix) []expr.Any {
	network := p.Masked().Addr().As4()
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: mask(p.Bits()), Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: network[:]},
	}
}

// InSet matches when the IPv4 address at offset is (or, with !in, is not)
// an element of set.
func InSet(offset uint32, set *nftables.Set, in bool) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: offset, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID, Invert: !in},
	}
}

// Interface matches the input (iif true) or output interface's name,
// equal or (eq false) different.
func Interface(iif bool, name string, eq bool) []expr.Any {
	key, op := expr.MetaKeyOIFNAME, expr.CmpOpEq
	if iif {
		key = expr.MetaKeyIIFNAME
	}
	if !eq {
		op = expr.CmpOpNeq
	}
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, name)
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: op, Register: 1, Data: b},
	}
}

// CtState matches connections in any of the states (expr.CtStateBit*).
func CtState(states uint32) []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4, Mask: binaryutil.NativeEndian.PutUint32(states), Xor: []byte{0, 0, 0, 0}},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0, 0, 0, 0}},
	}
}

// CtMark matches the connection's mark: equal to mark, or (eq false)
// different.
func CtMark(mark uint32, eq bool) []expr.Any {
	op := expr.CmpOpEq
	if !eq {
		op = expr.CmpOpNeq
	}
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeyMARK},
		&expr.Cmp{Op: op, Register: 1, Data: binaryutil.NativeEndian.PutUint32(mark)},
	}
}

// SetCtMark sets the connection's mark.
func SetCtMark(mark uint32) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: binaryutil.NativeEndian.PutUint32(mark)},
		&expr.Ct{Register: 1, SourceRegister: true, Key: expr.CtKeyMARK},
	}
}

// SetMark sets the packet's mark (what `ip rule fwmark` matches).
func SetMark(mark uint32) []expr.Any {
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: binaryutil.NativeEndian.PutUint32(mark)},
		&expr.Meta{Key: expr.MetaKeyMARK, SourceRegister: true, Register: 1},
	}
}

// Protocol matches the transport protocol (unix.IPPROTO_TCP, …).
func Protocol(proto byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
	}
}

// ICMPType matches ICMP messages of type typ.
func ICMPType(typ byte) []expr.Any {
	return append(Protocol(unix.IPPROTO_ICMP),
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{typ}},
	)
}

// DestinationPort matches the TCP or UDP destination port; combine it with
// Protocol.
func DestinationPort(port uint16) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
	}
}

// ClampMSS is `tcp flags syn tcp option maxseg size set rt mtu`: a SYN's
// MSS is lowered (never raised) to what the route's MTU carries.
func ClampMSS() []expr.Any {
	return append(Protocol(unix.IPPROTO_TCP),
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 1, Mask: []byte{0x02}, Xor: []byte{0}},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte{0}},
		&expr.Rt{Register: 1, Key: expr.RtTCPMSS},
		&expr.Byteorder{SourceRegister: 1, DestRegister: 1, Op: expr.ByteorderHton, Len: 2, Size: 2},
		&expr.Exthdr{SourceRegister: 1, Type: 2, Offset: 2, Len: 2, Op: expr.ExthdrOpTcpopt},
	)
}

// DNATPrefix rewrites the destination's network part to to's, keeping the
// host part: nft's `dnat ip prefix to`, iptables' NETMAP.
func DNATPrefix(to netip.Prefix) []expr.Any {
	return natPrefix(expr.NATTypeDestNAT, to)
}

// SNATPrefix is DNATPrefix for the source.
func SNATPrefix(to netip.Prefix) []expr.Any {
	return natPrefix(expr.NATTypeSourceNAT, to)
}

func natPrefix(t expr.NATType, to netip.Prefix) []expr.Any {
	first := to.Masked().Addr().As4()
	last := Last(to).As4()
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: first[:]},
		&expr.Immediate{Register: 2, Data: last[:]},
		&expr.NAT{Type: t, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegAddrMax: 2, Prefix: true},
	}
}

// SNAT rewrites the source to addr.
func SNAT(addr netip.Addr) []expr.Any {
	a := addr.As4()
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: a[:]},
		&expr.NAT{Type: expr.NATTypeSourceNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1},
	}
}

// DNAT rewrites the destination to addr:port.
func DNAT(addr netip.Addr, port uint16) []expr.Any {
	a := addr.As4()
	return []expr.Any{
		&expr.Immediate{Register: 1, Data: a[:]},
		&expr.Immediate{Register: 2, Data: binaryutil.BigEndian.PutUint16(port)},
		&expr.NAT{Type: expr.NATTypeDestNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1, RegProtoMin: 2, Specified: true},
	}
}

// Masquerade rewrites the source to the output interface's address.
func Masquerade() []expr.Any {
	return []expr.Any{&expr.Masq{}}
}

// Verdict ends a rule with accept, drop, …
func Verdict(k expr.VerdictKind) []expr.Any {
	return []expr.Any{&expr.Verdict{Kind: k}}
}

// Counter counts the packets and bytes that reach it.
func Counter() []expr.Any {
	return []expr.Any{&expr.Counter{}}
}

// Rule concatenates parts into one rule's expressions.
func Rule(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// IntervalElements are the elements of an interval set holding prefixes,
// merged where they overlap or touch.
func IntervalElements(prefixes []netip.Prefix) []nftables.SetElement {
	type span struct{ from, to uint64 } // [from, to)
	var spans []span
	for _, p := range prefixes {
		f := uint64(u32(p.Masked().Addr()))
		spans = append(spans, span{f, uint64(u32(Last(p))) + 1})
	}
	for i := 1; i < len(spans); i++ { // insertion sort: a handful of elements
		for j := i; j > 0 && spans[j].from < spans[j-1].from; j-- {
			spans[j], spans[j-1] = spans[j-1], spans[j]
		}
	}
	var merged []span
	for _, s := range spans {
		if n := len(merged); n > 0 && s.from <= merged[n-1].to {
			merged[n-1].to = max(merged[n-1].to, s.to)
			continue
		}
		merged = append(merged, s)
	}
	var out []nftables.SetElement
	for _, s := range merged {
		out = append(out, nftables.SetElement{Key: binaryutil.BigEndian.PutUint32(uint32(s.from))})
		if s.to <= 0xffffffff {
			out = append(out, nftables.SetElement{Key: binaryutil.BigEndian.PutUint32(uint32(s.to)), IntervalEnd: true})
		}
	}
	return out
}

// Last is the last address of p.
func Last(p netip.Prefix) netip.Addr {
	a := u32(p.Masked().Addr()) | ^uint32(0)>>p.Bits()
	if p.Bits() == 0 {
		a = ^uint32(0)
	}
	return netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)})
}

func u32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func mask(bits int) []byte {
	m := make([]byte, 4)
	for i := range bits {
		m[i/8] |= 0x80 >> (i % 8)
	}
	return m
}

// KeepSource is `snat to ip saddr`: a source NAT binding to the packet's
// own source. It changes nothing, but once a connection has a binding the
// kernel runs no later source NAT chain for it (a CNI's masquerade).
func KeepSource() []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: Source, Len: 4},
		&expr.NAT{Type: expr.NATTypeSourceNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1},
	}
}

// DeleteTable queues on c the deletion of IPv4 table name, whether it
// exists or not, and returns the table. It takes effect with c's next
// Flush, in one transaction with what is queued after it: adding the table
// again replaces one left by an earlier run atomically.
func DeleteTable(c *nftables.Conn, name string) *nftables.Table {
	t := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: name}
	c.AddTable(t) // deleting a table that does not exist would fail the batch
	c.DelTable(t)
	return t
}
