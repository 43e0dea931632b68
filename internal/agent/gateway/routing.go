package gateway

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// sysctl is one kernel setting of the gateway's network namespace.
type sysctl struct{ key, value string }

// namespaceSysctls are what forwarding between the pod network and the
// tunnel needs. Devices created later (the tunnel) inherit the defaults.
// With overlapping CIDRs a peer's source may be one of this namespace's own
// addresses (the gateway pod's) or route back through another interface,
// so reverse-path filtering is off and local sources are accepted (without
// accept_local, a peer pod whose IP is the gateway pod's is dropped as a
// martian some of the time). The tenant filter decides what passes.
var namespaceSysctls = []sysctl{
	{"net/ipv4/ip_forward", "1"},
	{"net/ipv4/conf/all/rp_filter", "0"},
	{"net/ipv4/conf/default/rp_filter", "0"},
	{"net/ipv4/conf/default/accept_local", "1"},
}

// deviceSysctls are the same for an existing device.
func deviceSysctls(dev string) []sysctl {
	return []sysctl{
		{"net/ipv4/conf/" + dev + "/rp_filter", "0"},
		{"net/ipv4/conf/" + dev + "/accept_local", "1"},
	}
}

// SetSysctls writes the settings the gateway's network namespace needs.
// The gateway's init container runs it with privileges (containers see
// /proc/sys read-only); the gateway itself then only checks them.
func SetSysctls() error {
	return ensureSysctls(namespaceSysctls)
}

// ensureSysctls makes each setting hold: values already right are left
// alone, so a read-only /proc/sys is fine when the init container did it.
func ensureSysctls(settings []sysctl) error {
	var errs []error
	for _, s := range settings {
		path := filepath.Join("/proc/sys", s.key)
		b, err := os.ReadFile(path)
		if err == nil && strings.TrimSpace(string(b)) == s.value {
			continue
		}
		if err := os.WriteFile(path, []byte(s.value), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("setting %s=%s (run offload-agent gateway --init with privileges first, as the chart's init container does): %w",
				strings.ReplaceAll(s.key, "/", "."), s.value, err))
		}
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
	return ensureSysctls(deviceSysctls(name))
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
