package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Per-device IPv4 settings (IPV4_DEVCONF_* of linux/ip.h), set over
// rtnetlink rather than /proc/sys: containers see /proc/sys read-only, and
// NET_ADMIN in the pod's own network namespace is all RTM_SETLINK needs, so
// the gateway needs no privileged init container.
const (
	devconfForwarding  = 1
	devconfRPFilter    = 8
	devconfAcceptLocal = 23
)

// forwardingDevconf is what forwarding between the pod network and the
// tunnel needs on every device packets come in on (the kernel checks the
// input device's forwarding, reverse-path and local-source settings). With
// overlapping CIDRs a peer's source may be one of this namespace's own
// addresses (the gateway pod's) or route back through another interface,
// so reverse-path filtering is off and local sources are accepted (without
// accept_local, a peer pod whose IP is the gateway pod's is dropped as a
// martian some of the time). The tenant filter decides what passes.
var forwardingDevconf = map[uint16]uint32{devconfForwarding: 1, devconfRPFilter: 0, devconfAcceptLocal: 1}

// setDevconf sets IPv4 settings of link over rtnetlink (IFLA_AF_SPEC,
// AF_INET, IFLA_INET_CONF), as the kernel's inet_set_link_af reads them.
func setDevconf(link netlink.Link, settings map[uint16]uint32) error {
	req := nl.NewNetlinkRequest(unix.RTM_SETLINK, unix.NLM_F_ACK)
	msg := nl.NewIfInfomsg(unix.AF_UNSPEC)
	msg.Index = int32(link.Attrs().Index)
	req.AddData(msg)
	conf := nl.NewRtAttr(unix.IFLA_INET_CONF, nil)
	for k, v := range settings {
		conf.AddRtAttr(int(k), nl.Uint32Attr(v))
	}
	inet := nl.NewRtAttr(unix.AF_INET, conf.Serialize())
	req.AddData(nl.NewRtAttr(unix.IFLA_AF_SPEC, inet.Serialize()))
	if _, err := req.Execute(unix.NETLINK_ROUTE, 0); err != nil {
		return fmt.Errorf("setting IPv4 forwarding, rp_filter=0 and accept_local on %s: %w", link.Attrs().Name, err)
	}
	return nil
}

// prepareForwarding sets forwardingDevconf on every device of the
// namespace but loopback (the tunnel's is set when it is made), and checks
// the one setting no device can override: the namespace-wide rp_filter,
// inherited from the node, counts when it is stricter than the device's.
func prepareForwarding() error {
	links, err := netlink.LinkList()
	if err != nil {
		return fmt.Errorf("listing the network devices: %w", err)
	}
	var errs []error
	for _, l := range links {
		if l.Attrs().Flags&net.FlagLoopback != 0 {
			continue
		}
		if err := setDevconf(l, forwardingDevconf); err != nil {
			errs = append(errs, err)
		}
	}
	if b, err := os.ReadFile("/proc/sys/net/ipv4/conf/all/rp_filter"); err == nil && strings.TrimSpace(string(b)) == "1" {
		errs = append(errs, errors.New("strict reverse-path filtering (net.ipv4.conf.all.rp_filter=1, inherited from the node) drops the peer's packets: "+
			"set net.ipv4.conf.all.rp_filter to 0 or 2 on the nodes that run gateways (network.gateway.nodeSelector), then restart the gateway"))
	}
	return errors.Join(errs...)
}

// setupLink gives the tunnel device its address and MTU and brings it up.
func setupLink(name string, addr netip.Addr, mtu int) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("finding device %s: %w", name, err)
	}
	if err := netlink.LinkSetMTU(l, mtu); err != nil {
		return fmt.Errorf("setting the MTU of %s to %d: %w", name, mtu, err)
	}
	a := &netlink.Addr{IPNet: &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(tunnelPrefix.Bits(), 32)}}
	if err := netlink.AddrReplace(l, a); err != nil {
		return fmt.Errorf("adding address %v to %s: %w", addr, name, err)
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return fmt.Errorf("bringing up %s: %w", name, err)
	}
	return setDevconf(l, forwardingDevconf)
}

// setupRouting routes marked packets into the tunnel, ahead of the local
// table.
func setupRouting(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("finding device %s: %w", name, err)
	}
	_, all, _ := net.ParseCIDR("0.0.0.0/0")
	if err := netlink.RouteReplace(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: all, Table: routeTable, Scope: netlink.SCOPE_LINK}); err != nil {
		return fmt.Errorf("adding the tunnel's route in table %d: %w", routeTable, err)
	}
	if err := replaceRule(markRule()); err != nil {
		return fmt.Errorf("adding the rule for marked packets: %w", err)
	}
	// The local table moves behind the mark rule.
	if err := replaceRule(localRule(localRulePriority)); err != nil {
		return fmt.Errorf("moving the local table's rule: %w", err)
	}
	if err := netlink.RuleDel(localRule(0)); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("moving the local table's rule: %w", err)
	}
	return nil
}

// teardownRouting puts the rules back as they were; routes go with the
// device.
func teardownRouting() error {
	var errs []error
	if err := replaceRule(localRule(0)); err != nil {
		errs = append(errs, err)
	}
	for _, r := range []*netlink.Rule{localRule(localRulePriority), markRule()} {
		if err := netlink.RuleDel(r); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func markRule() *netlink.Rule {
	r := netlink.NewRule()
	r.Priority = markRulePriority
	r.Mark = fwMarkTunnel
	r.Table = routeTable
	r.Family = unix.AF_INET
	return r
}

func localRule(priority int) *netlink.Rule {
	r := netlink.NewRule()
	r.Priority = priority
	r.Table = unix.RT_TABLE_LOCAL
	r.Family = unix.AF_INET
	return r
}

// replaceRule adds r unless an equal rule exists.
func replaceRule(r *netlink.Rule) error {
	rules, err := netlink.RuleList(unix.AF_INET)
	if err != nil {
		return err
	}
	for _, x := range rules {
		if x.Priority == r.Priority && x.Table == r.Table && x.Mark == r.Mark {
			return nil
		}
	}
	return netlink.RuleAdd(r)
}

// defaultRouteAddr is the IPv4 address of the interface holding the
// default route: the gateway pod's own IP.
func defaultRouteAddr() (netip.Addr, error) {
	l, err := defaultRouteLink()
	if err != nil {
		return netip.Addr{}, err
	}
	addrs, err := netlink.AddrList(l, unix.AF_INET)
	if err != nil {
		return netip.Addr{}, err
	}
	for _, a := range addrs {
		if ip, ok := netip.AddrFromSlice(a.IP.To4()); ok && ip.IsGlobalUnicast() {
			return ip, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("interface %s has no IPv4 address; pass the pod's IP", l.Attrs().Name)
}

func defaultRouteLink() (netlink.Link, error) {
	routes, err := netlink.RouteListFiltered(unix.AF_INET, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		return nil, fmt.Errorf("listing routes: %w", err)
	}
	for _, r := range routes {
		if r.Dst == nil || r.Dst.String() == "0.0.0.0/0" {
			return netlink.LinkByIndex(r.LinkIndex)
		}
	}
	return nil, errors.New("no default route")
}

// pathMTU is the tunnel MTU this side proposes: the MTU of the interface
// toward the peer's endpoint (the default route's for the server) minus
// the tunnel's overhead.
func pathMTU(endpoint string) (int, error) {
	var l netlink.Link
	if endpoint != "" {
		ep, err := net.ResolveUDPAddr("udp4", endpoint)
		if err != nil {
			return 0, fmt.Errorf("resolving %s: %w", endpoint, err)
		}
		routes, err := netlink.RouteGet(ep.IP)
		if err != nil || len(routes) == 0 {
			return 0, fmt.Errorf("no route to the peer endpoint %s: %v", endpoint, err)
		}
		if l, err = netlink.LinkByIndex(routes[0].LinkIndex); err != nil {
			return 0, err
		}
	} else {
		var err error
		if l, err = defaultRouteLink(); err != nil {
			return 0, err
		}
	}
	return max(l.Attrs().MTU-tunnelOverhead, minMTU), nil
}
