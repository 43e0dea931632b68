// Package fabric is the node side of the network fabric, run by the
// offload-fabric DaemonSet on every real node (host network, NET_ADMIN):
// it routes each peer's view to that peer's gateway pod (through the
// gateway's node when it runs elsewhere), and keeps the node's CNI from
// masquerading pods' traffic to the views, so the peer sees which pod
// called. Routes carry a protocol number of their own and the rules live in
// a table of their own, so removal is exact, also after a crash. See
// docs/networking.md.
package fabric

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sort"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kubectl-offload/kubectl-offload/internal/nftexpr"
)

const (
	// RouteProtocol marks the fabric's routes (ip route … proto 0x6f).
	RouteProtocol netlink.RouteProtocol = 0x6f
	tableName                           = "offload-fabric"
	// natPriority runs before every CNI's and kube-proxy's source NAT
	// (100): the binding it sets makes the kernel skip theirs.
	natPriority = 90
)

// Route is one view and where its packets go next.
type Route struct {
	// View is a peer's pod CIDR as this cluster sees it.
	View netip.Prefix
	// Via is the gateway pod's IP on its own node, else that node's IP.
	Via netip.Addr
}

// Plan is what one node must hold.
type Plan struct {
	Routes []Route
	// LocalPodCIDRs are this cluster's pod CIDRs: traffic from them to a
	// view keeps its source.
	LocalPodCIDRs []netip.Prefix
}

// views are the plan's destination prefixes.
func (p Plan) views() []netip.Prefix {
	out := make([]netip.Prefix, 0, len(p.Routes))
	for _, r := range p.Routes {
		out = append(out, r.View)
	}
	return out
}

// Apply makes the node's routes and rules those of p: it adds or replaces
// the routes of p, deletes every other route of the fabric, and replaces
// the nftables table in one transaction.
func Apply(p Plan) error {
	have, err := Routes()
	if err != nil {
		return err
	}
	want := map[netip.Prefix]bool{}
	var errs []error
	for _, r := range p.Routes {
		want[r.View] = true
		if err := netlink.RouteReplace(&netlink.Route{
			Dst: prefixNet(r.View), Gw: r.Via.AsSlice(), Protocol: RouteProtocol,
		}); err != nil {
			errs = append(errs, fmt.Errorf("routing %v via %v: %w", r.View, r.Via, err))
		}
	}
	for _, r := range have {
		if !want[r.View] {
			errs = append(errs, deleteRoute(r.View))
		}
	}
	errs = append(errs, applyRules(p))
	return errors.Join(errs...)
}

// Remove deletes every route and rule of the fabric.
func Remove() error {
	have, err := Routes()
	if err != nil {
		return err
	}
	var errs []error
	for _, r := range have {
		errs = append(errs, deleteRoute(r.View))
	}
	c := &nftables.Conn{}
	nftexpr.DeleteTable(c, tableName)
	if err := c.Flush(); err != nil {
		errs = append(errs, fmt.Errorf("deleting nftables table %s: %w", tableName, err))
	}
	return errors.Join(errs...)
}

// Routes lists the fabric's routes on this node, by view.
func Routes() ([]Route, error) {
	routes, err := netlink.RouteListFiltered(unix.AF_INET, &netlink.Route{Protocol: RouteProtocol, Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("listing routes: %w", err)
	}
	var out []Route
	for _, r := range routes {
		if r.Dst == nil {
			continue
		}
		view, ok := netipPrefix(r.Dst)
		if !ok {
			continue
		}
		via, _ := netip.AddrFromSlice(r.Gw.To4())
		out = append(out, Route{View: view, Via: via})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].View.String() < out[j].View.String() })
	return out, nil
}

func deleteRoute(view netip.Prefix) error {
	err := netlink.RouteDel(&netlink.Route{Dst: prefixNet(view), Protocol: RouteProtocol})
	if err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("deleting the route to %v: %w", view, err)
	}
	return nil
}

// applyRules replaces the table: connections from local pods to a view get
// their own source as NAT binding, which makes every later source NAT
// (CNI masquerade, kube-proxy) leave them alone.
func applyRules(p Plan) error {
	c := &nftables.Conn{}
	t := nftexpr.DeleteTable(c, tableName)
	if len(p.Routes) > 0 && len(p.LocalPodCIDRs) > 0 { // else no table at all
		c.AddTable(t)
		local := &nftables.Set{Table: t, Name: "local-pods", KeyType: nftables.TypeIPAddr, Interval: true}
		views := &nftables.Set{Table: t, Name: "views", KeyType: nftables.TypeIPAddr, Interval: true}
		if err := errors.Join(c.AddSet(local, nftexpr.IntervalElements(p.LocalPodCIDRs)), c.AddSet(views, nftexpr.IntervalElements(p.views()))); err != nil {
			return err
		}
		prio := nftables.ChainPriority(natPriority)
		ch := c.AddChain(&nftables.Chain{Name: "keep-source", Table: t, Type: nftables.ChainTypeNAT, Hooknum: nftables.ChainHookPostrouting, Priority: &prio})
		c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: nftexpr.Rule(
			nftexpr.InSet(nftexpr.Source, local, true), nftexpr.InSet(nftexpr.Destination, views, true), nftexpr.KeepSource())})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("installing nftables table %s: %w", tableName, err)
	}
	return nil
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Masked().Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}
}

func netipPrefix(n *net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP.To4())
	if !ok {
		return netip.Prefix{}, false
	}
	bits, _ := n.Mask.Size()
	return netip.PrefixFrom(a, bits), true
}

// Equal tells whether two plans hold the same routes and CIDRs.
func (p Plan) Equal(q Plan) bool {
	return slices.Equal(p.Routes, q.Routes) && slices.Equal(p.LocalPodCIDRs, q.LocalPodCIDRs)
}
