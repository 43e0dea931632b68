package localcluster

import (
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/kubectl-offload/kubectl-offload/internal/nftexpr"
)

// apiForwardTable is the nftables table, in a k3s-flavoured cluster's real
// node, that makes the API server answer at the node's address.
const apiForwardTable = "offload-k3s"

// forwardAPIServer makes the API server, which listens on the host at
// port, answer at the node's own address and the same port, as a k3s
// server's does on every address of its machine: connections to
// n.IP:port, from other machines (prerouting) or the node itself
// (output), go to n.HostIP:port, and leave the node from its address, so
// that the answers come back through it. The table goes with the node's
// network namespace.
func (n *RealNode) forwardAPIServer(port uint16) error {
	ns, err := netns.GetFromName(n.NetNS)
	if err != nil {
		return fmt.Errorf("opening the network namespace of node %s: %w", n.Name, err)
	}
	defer func() { _ = ns.Close() }()
	c, err := nftables.New(nftables.WithNetNSFd(int(ns)))
	if err != nil {
		return err
	}
	node, host := netip.MustParseAddr(n.IP), netip.MustParseAddr(n.HostIP)
	nftexpr.DeleteTable(c, apiForwardTable)
	tbl := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: apiForwardTable})
	toNode := nftexpr.Rule(nftexpr.MatchPrefix(nftexpr.Destination, netip.PrefixFrom(node, 32)),
		nftexpr.Protocol(unix.IPPROTO_TCP), nftexpr.DestinationPort(port), nftexpr.DNAT(host, port))
	for _, h := range []struct {
		name string
		hook *nftables.ChainHook
	}{{"prerouting", nftables.ChainHookPrerouting}, {"output", nftables.ChainHookOutput}} {
		ch := c.AddChain(&nftables.Chain{Name: h.name, Table: tbl, Type: nftables.ChainTypeNAT,
			Hooknum: h.hook, Priority: nftables.ChainPriorityNATDest})
		c.AddRule(&nftables.Rule{Table: tbl, Chain: ch, Exprs: toNode})
	}
	post := c.AddChain(&nftables.Chain{Name: "postrouting", Table: tbl, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource})
	c.AddRule(&nftables.Rule{Table: tbl, Chain: post, Exprs: nftexpr.Rule(
		nftexpr.MatchPrefix(nftexpr.Destination, netip.PrefixFrom(host, 32)),
		nftexpr.Protocol(unix.IPPROTO_TCP), nftexpr.DestinationPort(port), nftexpr.Masquerade())})
	if err := c.Flush(); err != nil {
		return fmt.Errorf("forwarding %s:%d to the API server on node %s: %w", n.IP, port, n.Name, err)
	}
	return nil
}
