// Package routing is the node side of the network fabric, run by the
// offload-fabric DaemonSet on every real node (host network, NET_ADMIN):
// it routes each peer's view to that peer's gateway pod (through the
// gateway's node when it runs elsewhere), and keeps the node's CNI from
// masquerading pods' traffic to the views, so the peer sees which pod
// called. The routes live in a routing table of the fabric's own, which
// policy rules consult only for traffic the node forwards and for pod
// sources, never for the node's own traffic: whatever a peer announces,
// the host's routing (to its API server, DNS, metadata, node network) is
// never steered into a tunnel. Routes carry a protocol number of their own
// and the nftables rules live in a table of their own, so removal is
// exact, also after a crash. See docs/networking.md.
package routing

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
	// RouteTable is the fabric's routing table (ip route show table 28518).
	RouteTable = 0x6f66
	// sourceRulePriority and forwardRulePriority are the priorities of
	// the policy rules that send traffic to RouteTable, ahead of the main
	// table (32766): from the local pod CIDRs (pods' packets, and the
	// reverse-path check of packets coming back to them), and for every
	// packet the node forwards (a NodePort Service's backend in a view).
	// The node's own packets match neither.
	sourceRulePriority  = 0x6f66
	forwardRulePriority = 0x6f67
	tableName           = "offload-fabric"
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
			Dst: prefixNet(r.View), Gw: r.Via.AsSlice(), Protocol: RouteProtocol, Table: RouteTable,
		}); err != nil {
			errs = append(errs, fmt.Errorf("routing %v via %v: %w", r.View, r.Via, err))
		}
	}
	for _, r := range have {
		if !want[r.View] {
			errs = append(errs, deleteRoute(r.View))
		}
	}
	errs = append(errs, removeMainTableRoutes(), applyPolicy(p), applyRules(p))
	return errors.Join(errs...)
}

// policy are the rules that send traffic to the fabric's table: none
// without a route.
func (p Plan) policy() []netlink.Rule {
	if len(p.Routes) == 0 {
		return nil
	}
	var out []netlink.Rule
	for _, c := range p.LocalPodCIDRs {
		r := fabricRule(sourceRulePriority)
		r.Src = prefixNet(c)
		out = append(out, *r)
	}
	r := fabricRule(forwardRulePriority)
	r.IifName, r.Invert = "lo", true // not from the node itself
	return append(out, *r)
}

func fabricRule(priority int) *netlink.Rule {
	r := netlink.NewRule()
	r.Family, r.Table, r.Priority = unix.AF_INET, RouteTable, priority
	return r
}

// sameRule tells whether two of the fabric's rules select the same traffic.
func sameRule(a, b netlink.Rule) bool {
	return a.Priority == b.Priority && a.IifName == b.IifName && a.Invert == b.Invert && a.Src.String() == b.Src.String()
}

// policyDiff returns the rules of have that want lacks, and those of want
// that have lacks.
func policyDiff(have, want []netlink.Rule) (stale, missing []netlink.Rule) {
	for _, r := range have {
		if !slices.ContainsFunc(want, func(w netlink.Rule) bool { return sameRule(r, w) }) {
			stale = append(stale, r)
		}
	}
	for _, w := range want {
		if !slices.ContainsFunc(have, func(r netlink.Rule) bool { return sameRule(r, w) }) {
			missing = append(missing, w)
		}
	}
	return stale, missing
}

// applyPolicy makes the rules to the fabric's table those of p.
func applyPolicy(p Plan) error {
	have, err := policyRules()
	if err != nil {
		return err
	}
	stale, missing := policyDiff(have, p.policy())
	var errs []error
	for _, r := range stale {
		if err := netlink.RuleDel(&r); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("deleting the rule %v: %w", r, err))
		}
	}
	for _, w := range missing {
		if err := netlink.RuleAdd(&w); err != nil && !errors.Is(err, unix.EEXIST) {
			errs = append(errs, fmt.Errorf("adding the rule %v: %w", w, err))
		}
	}
	return errors.Join(errs...)
}

// policyRules are the node's rules to the fabric's table.
func policyRules() ([]netlink.Rule, error) {
	rules, err := netlink.RuleListFiltered(unix.AF_INET, &netlink.Rule{Table: RouteTable}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("listing rules: %w", err)
	}
	return rules, nil
}

// removeMainTableRoutes deletes the fabric's routes from the main table,
// where versions before its own table put them.
func removeMainTableRoutes() error {
	routes, err := netlink.RouteListFiltered(unix.AF_INET, &netlink.Route{Protocol: RouteProtocol, Table: unix.RT_TABLE_MAIN},
		netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
	if err != nil {
		return fmt.Errorf("listing routes: %w", err)
	}
	var errs []error
	for _, r := range routes {
		if err := netlink.RouteDel(&r); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("deleting the route to %v: %w", r.Dst, err))
		}
	}
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
	errs = append(errs, removeMainTableRoutes(), applyPolicy(Plan{}))
	c := &nftables.Conn{}
	nftexpr.DeleteTable(c, tableName)
	if err := c.Flush(); err != nil {
		errs = append(errs, fmt.Errorf("deleting nftables table %s: %w", tableName, err))
	}
	return errors.Join(errs...)
}

// Routes lists the fabric's routes on this node, by view.
func Routes() ([]Route, error) {
	routes, err := netlink.RouteListFiltered(unix.AF_INET, &netlink.Route{Protocol: RouteProtocol, Table: RouteTable},
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
	err := netlink.RouteDel(&netlink.Route{Dst: prefixNet(view), Protocol: RouteProtocol, Table: RouteTable})
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
