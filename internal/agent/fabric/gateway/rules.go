package gateway

import (
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/kubectl-offload/kubectl-offload/internal/nftexpr"
)

// The gateway's netfilter and routing marks, all inside its own pod's
// network namespace.
const (
	tableName = "offload-gateway"
	// ctMarkOut marks connections opened from this cluster toward the peer,
	// ctMarkIn those the peer opened toward this cluster.
	ctMarkOut uint32 = 0x1
	ctMarkIn  uint32 = 0x2
	// ctMarkMirror marks connections from local pods to the peer's view of
	// local pods (Config.Mirror): they never enter the tunnel.
	ctMarkMirror uint32 = 0x3
	// fwMarkTunnel marks packets that must leave through the tunnel: the
	// original direction of outgoing connections and the replies of
	// incoming ones. They are routed by mark, not by address, because with
	// overlapping CIDRs a peer's real address may be one of ours.
	fwMarkTunnel uint32 = 0x4f46
	// routeTable holds the tunnel's default route.
	routeTable = 7746
	// markRulePriority comes before the local table, which moves from 0 to
	// localRulePriority: a peer's address equal to the gateway's own must
	// still go into the tunnel.
	markRulePriority  = 90
	localRulePriority = 100
	// livenessPort is the UDP port of the liveness echo, on the tunnel
	// addresses only.
	livenessPort = 51821
	// icmpRedirect is ICMP's redirect message type.
	icmpRedirect = 5
)

// ruleset is the whole nftables table for cfg: the translation between the
// peer's views and its real addresses, the routing marks, the tenant
// filter and the MSS clamp. It is applied in one transaction, so packets
// never see half of it.
func ruleset(c *nftables.Conn, cfg *Config, podIP netip.Addr) {
	wg := cfg.Interface
	// Replaces a table left by an earlier run or an older configuration
	// within the same transaction.
	t := nftexpr.DeleteTable(c, tableName)
	c.AddTable(t)

	local := &nftables.Set{Table: t, Name: "local-pods", KeyType: nftables.TypeIPAddr, Interval: true}
	allowed := &nftables.Set{Table: t, Name: "allowed", KeyType: nftables.TypeIPAddr, Interval: true}
	for set, prefixes := range map[*nftables.Set][]netip.Prefix{local: cfg.LocalPodCIDRs, allowed: cfg.allowed()} {
		// The set's elements can only fail on the wire; Flush reports it.
		_ = c.AddSet(set, nftexpr.IntervalElements(prefixes))
	}

	chain := func(name string, typ nftables.ChainType, hook *nftables.ChainHook, prio *nftables.ChainPriority) *nftables.Chain {
		return c.AddChain(&nftables.Chain{Name: name, Table: t, Type: typ, Hooknum: hook, Priority: prio})
	}
	mark := chain("mark", nftables.ChainTypeFilter, nftables.ChainHookPrerouting, nftables.ChainPriorityMangle)
	dnat := chain("dnat", nftables.ChainTypeNAT, nftables.ChainHookPrerouting, nftables.ChainPriorityNATDest)
	snat := chain("snat", nftables.ChainTypeNAT, nftables.ChainHookPostrouting, nftables.ChainPriorityNATSource)
	forward := chain("forward", nftables.ChainTypeFilter, nftables.ChainHookForward, nftables.ChainPriorityFilter)
	input := chain("input", nftables.ChainTypeFilter, nftables.ChainHookInput, nftables.ChainPriorityFilter)
	add := func(ch *nftables.Chain, parts ...[]expr.Any) {
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: nftexpr.Rule(parts...)})
	}
	fromLocal, fromPeer := nftexpr.Interface(true, wg, false), nftexpr.Interface(true, wg, true)
	isNew := nftexpr.CtState(expr.CtStateBitNEW)

	// Connections are marked by direction when they start; every packet
	// that must enter the tunnel then carries the routing mark.
	for _, m := range cfg.Peer {
		add(mark, fromLocal, isNew, nftexpr.MatchPrefix(nftexpr.Destination, m.View), nftexpr.SetCtMark(ctMarkOut))
	}
	for _, m := range cfg.Mirror {
		add(mark, fromLocal, isNew, nftexpr.MatchPrefix(nftexpr.Destination, m.View), nftexpr.SetCtMark(ctMarkMirror))
	}
	add(mark, fromPeer, isNew, nftexpr.SetCtMark(ctMarkIn))
	add(mark, fromLocal, nftexpr.CtMark(ctMarkOut, true), nftexpr.SetMark(fwMarkTunnel))
	add(mark, fromLocal, nftexpr.CtMark(ctMarkIn, true), nftexpr.SetMark(fwMarkTunnel))

	// On the wire, addresses are always real: outgoing destinations go from
	// this cluster's view to the peer's real addresses, incoming sources
	// from the peer's real addresses to this cluster's view.
	for _, m := range cfg.Peer {
		if !m.Translated() {
			continue
		}
		add(dnat, fromLocal, nftexpr.MatchPrefix(nftexpr.Destination, m.View), nftexpr.DNATPrefix(m.Real))
		add(snat, nftexpr.CtMark(ctMarkIn, true), nftexpr.MatchPrefix(nftexpr.Source, m.Real), nftexpr.SNATPrefix(m.View))
	}
	// A mirrored call goes back to the real pod, from the caller's view:
	// the answer comes back through this gateway, and the callee sees the
	// caller where the peer shows it.
	for _, m := range cfg.Mirror {
		add(dnat, fromLocal, nftexpr.CtMark(ctMarkMirror, true), nftexpr.MatchPrefix(nftexpr.Destination, m.View), nftexpr.DNATPrefix(m.Real))
		add(snat, nftexpr.CtMark(ctMarkMirror, true), nftexpr.MatchPrefix(nftexpr.Source, m.Real), nftexpr.SNATPrefix(m.View))
	}
	// Sources outside the pod CIDRs (nodes, hostNetwork pods) have no view
	// on the peer: they leave as the gateway pod.
	add(snat, nftexpr.Interface(false, wg, true), nftexpr.CtMark(ctMarkOut, true),
		nftexpr.InSet(nftexpr.Source, local, false), nftexpr.SNAT(podIP))

	// What enters the tunnel fits it; the tenant filter lets the peer open
	// connections only to the allowed local pods.
	toPeer := nftexpr.Interface(false, wg, true)
	add(forward, toPeer, nftexpr.ClampMSS())
	add(forward, fromPeer, isNew, nftexpr.InSet(nftexpr.Destination, allowed, false), nftexpr.Counter(), nftexpr.Verdict(expr.VerdictDrop))
	// A provider lends its tunnel to its tenant's pods only: its own pods,
	// other tenants', its nodes and hostNetwork pods open no connection to
	// the consumer. (The DNAT above left sources alone.)
	if cfg.Role == RoleServer {
		add(forward, toPeer, isNew, nftexpr.InSet(nftexpr.Source, allowed, false), nftexpr.Counter(), nftexpr.Verdict(expr.VerdictDrop))
	}

	// Mirrored calls run between the allowed (the tenant's) pods only. They
	// leave through the device they came in on, where the kernel would
	// tell the caller to skip the gateway (an ICMP redirect) and so its
	// translation: the gateway sends none.
	if len(cfg.Mirror) > 0 {
		mirrored := nftexpr.CtMark(ctMarkMirror, true)
		add(forward, mirrored, isNew, nftexpr.InSet(nftexpr.Source, allowed, false), nftexpr.Counter(), nftexpr.Verdict(expr.VerdictDrop))
		add(forward, mirrored, isNew, nftexpr.InSet(nftexpr.Destination, allowed, false), nftexpr.Counter(), nftexpr.Verdict(expr.VerdictDrop))
		output := chain("output", nftables.ChainTypeFilter, nftables.ChainHookOutput, nftables.ChainPriorityFilter)
		add(output, nftexpr.ICMPType(icmpRedirect), nftexpr.Verdict(expr.VerdictDrop))
	}

	// The gateway itself answers the peer only on the liveness port.
	add(input, fromPeer, nftexpr.CtState(expr.CtStateBitESTABLISHED|expr.CtStateBitRELATED), nftexpr.Verdict(expr.VerdictAccept))
	add(input, fromPeer, nftexpr.Protocol(unix.IPPROTO_UDP), nftexpr.DestinationPort(livenessPort), nftexpr.Verdict(expr.VerdictAccept))
	add(input, fromPeer, nftexpr.Verdict(expr.VerdictDrop))
}

// applyRules installs the ruleset of cfg, replacing the one before.
func applyRules(cfg *Config, podIP netip.Addr) error {
	c := &nftables.Conn{}
	ruleset(c, cfg, podIP)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("installing nftables table %s: %w", tableName, err)
	}
	return nil
}

// deleteRules removes the table; a namespace without it is fine.
func deleteRules() error {
	c := &nftables.Conn{}
	nftexpr.DeleteTable(c, tableName)
	if err := c.Flush(); err != nil {
		return fmt.Errorf("deleting nftables table %s: %w", tableName, err)
	}
	return nil
}

// filteredPackets reads how many packets the tenant filter dropped, both
// ways.
func filteredPackets() (uint64, error) {
	c := &nftables.Conn{}
	t := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: tableName}
	rules, err := c.GetRules(t, &nftables.Chain{Name: "forward", Table: t})
	if err != nil {
		return 0, err
	}
	var n uint64
	for _, r := range rules {
		for _, e := range r.Exprs {
			if ctr, ok := e.(*expr.Counter); ok {
				n += ctr.Packets
			}
		}
	}
	return n, nil
}
