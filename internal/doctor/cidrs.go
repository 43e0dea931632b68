package doctor

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/helmclient"
	"github.com/kubectl-offload/kubectl-offload/internal/ipam"
	"github.com/kubectl-offload/kubectl-offload/internal/status"
)

// The fixes of the CIDR checks.
const (
	setPodCIDR     = "kubectl offload upgrade --pod-cidr CIDR"
	setServiceCIDR = "kubectl offload upgrade --service-cidr CIDR"
	setRemapPools  = "kubectl offload upgrade --set 'network.remapPools={CIDR}'"
	setReserved    = "kubectl offload upgrade --set 'network.reservedCIDRs={CIDR}'"
)

// cidrChecker checks that the pod and service CIDRs are set and that they
// and the remap pools do not overlap.
type cidrChecker struct{}

func (cidrChecker) Name() string { return "cidrs" }

func (cidrChecker) Check(ctx context.Context, d *Env) status.Section {
	s := status.Section{Title: "CIDRs"}
	rel, c := status.ReleaseOrCheck(d.Env)
	if c != nil {
		s.Checks = append(s.Checks, *c)
		return s
	}
	pod, svc, pools := cidrList(rel.Values, "podCIDR"), cidrList(rel.Values, "serviceCIDR"), cidrList(rel.Values, "remapPools")
	s.Fields = []status.Field{
		{Name: "podCIDR", Label: "Pod CIDR", Value: strings.Join(pod, ", ")},
		{Name: "serviceCIDR", Label: "Service CIDR", Value: strings.Join(svc, ", ")},
		{Name: "remapPools", Label: "Remap pools", Value: strings.Join(pools, ", ")},
	}
	fabric := helmclient.Bool(rel.Values, "network", "enabled")
	s.Checks = cidrChecks(pod, svc, pools, fabric)
	reserved := cidrList(rel.Values, "reservedCIDRs")
	s.Fields = append(s.Fields, status.Field{Name: "reservedCIDRs", Label: "Reserved", Value: strings.Join(reserved, ", ")})
	addrs, err := nodeAddresses(ctx, d.Kube)
	if err != nil {
		s.Checks = append(s.Checks, status.Warn("reservedCIDRs", "cannot list the nodes to check network.reservedCIDRs: %v", err))
		return s
	}
	s.Checks = append(s.Checks, reservedCheck(reserved, addrs, pools, fabric))
	return s
}

// nodeAddresses lists the internal addresses of this cluster's real nodes.
func nodeAddresses(ctx context.Context, kube kubernetes.Interface) ([]netip.Addr, error) {
	nodes, err := kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: offloadv1alpha1.LabelType + "!=" + offloadv1alpha1.TypeVirtualNode})
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == corev1.NodeInternalIP {
				out = append(out, ip)
			}
		}
	}
	return out, nil
}

// reservedCheck judges the remap pools against the nodes' addresses. Views
// come only from the pools, so what matters is what of the hosts' networks
// lies in them: a node address in a pool, not reserved, fails (a view
// could take that node's subnet); a node whose /16 reaches into a pool,
// not reserved, warns (the node network may, and a view there would hide
// its hosts from pods). The nodes' and API server's own addresses the
// agent keeps out of views by itself.
func reservedCheck(reserved []string, nodes []netip.Addr, pools []string, fabric bool) status.Check {
	const name = "reservedCIDRs"
	if !fabric {
		return status.OK(name, "the network fabric is off")
	}
	prefixes, err := ipam.ParsePrefixes("reserved range", reserved)
	if err != nil {
		return status.Fail(name, "%v; run %s", err, setReserved)
	}
	poolPrefixes, _ := ipam.ParsePrefixes("remap pool", pools)
	overlapping := func(p netip.Prefix, in []netip.Prefix) (netip.Prefix, bool) {
		for _, q := range in {
			if q.Overlaps(p) {
				return q, true
			}
		}
		return netip.Prefix{}, false
	}
	var near []string
	for _, a := range nodes {
		host := netip.PrefixFrom(a, 32)
		if _, ok := overlapping(host, prefixes); ok {
			continue
		}
		if p, in := overlapping(host, poolPrefixes); in {
			return status.Fail(name, "node address %s lies in the remap pool %s and is not reserved: a peer's view could take this node's subnet; run %s with the node network, or move the pool",
				a, p.Masked(), setReserved)
		}
		net16, _ := a.Prefix(16)
		if p, in := overlapping(net16, poolPrefixes); in {
			if _, held := overlapping(net16, prefixes); !held {
				near = append(near, fmt.Sprintf("%s (pool %s)", a, p.Masked()))
			}
		}
	}
	if len(near) > 0 {
		return status.Warn(name, "the nodes at %s are in the same /16 as a remap pool: if their network reaches into the pool, a view there would hide its hosts from pods; run %s with the node network, or move the pool",
			strings.Join(near, ", "), setReserved)
	}
	list := "none"
	if len(reserved) > 0 {
		list = strings.Join(reserved, ", ")
	}
	return status.OK(name, "views come only from the remap pools (%s), which hold no node address; reserved within them: %s", strings.Join(pools, ", "), list)
}

// cidrList reads network.NAME, a CIDR, a comma-separated list of them or
// a list, as single CIDRs.
func cidrList(values map[string]any, name string) []string {
	var out []string
	for _, v := range helmclient.Strings(values, "network", name) {
		for _, c := range strings.Split(v, ",") {
			if c = strings.TrimSpace(c); c != "" {
				out = append(out, c)
			}
		}
	}
	return out
}

// cidrChecks judges the pod and service CIDRs and the remap pools;
// fabric says the network fabric is on, which needs the pod CIDR.
func cidrChecks(pod, svc, pools []string, fabric bool) []status.Check {
	var checks []status.Check
	podPrefixes, podOK := cidrPresence(&checks, "podCIDR", "pod CIDR", pod, setPodCIDR, fabric)
	svcPrefixes, svcOK := cidrPresence(&checks, "serviceCIDR", "service CIDR", svc, setServiceCIDR, false)
	if podOK && svcOK {
		if p, q, clash := firstOverlap(podPrefixes, svcPrefixes); clash {
			checks = append(checks, status.Fail("podServiceOverlap", "the pod CIDR %s overlaps the service CIDR %s: one of them is wrong; run %s %s with this cluster's real ranges",
				p, q, setPodCIDR, strings.TrimPrefix(setServiceCIDR, "kubectl offload upgrade ")))
		} else {
			checks = append(checks, status.OK("podServiceOverlap", "the pod and service CIDRs do not overlap"))
		}
	}
	return append(checks, remapPoolsCheck(pools, podPrefixes, svcPrefixes, fabric))
}

// cidrPresence appends the check that the CIDRs of one kind are set and
// valid, and returns them parsed; valid is false when they are missing or
// one does not parse. required makes missing CIDRs a failure.
func cidrPresence(checks *[]status.Check, name, what string, cidrs []string, fix string, required bool) (_ []netip.Prefix, valid bool) {
	if len(cidrs) == 0 {
		if required {
			*checks = append(*checks, status.Fail(name, "the %s is not set, and the network fabric needs it: run %s", what, fix))
		} else {
			*checks = append(*checks, status.Warn(name, "the %s is not set: peers cannot tell when theirs overlaps this cluster's; run %s", what, fix))
		}
		return nil, false
	}
	prefixes, err := ipam.ParsePrefixes(what, cidrs)
	if err != nil {
		*checks = append(*checks, status.Fail(name, "%v; run %s", err, fix))
		return nil, false
	}
	*checks = append(*checks, status.OK(name, "the %s is %s", what, strings.Join(cidrs, ", ")))
	return prefixes, true
}

// remapPoolsCheck judges the remap pools: valid, apart from each other,
// and clear of the pod and service CIDRs.
func remapPoolsCheck(pools []string, pod, svc []netip.Prefix, fabric bool) status.Check {
	const name = "remapPools"
	if len(pools) == 0 {
		if fabric {
			return status.Fail(name, "there are no remap pools: every peer's pod CIDR is seen through a block of one, so no peer can be reached; run %s", setRemapPools)
		}
		return status.OK(name, "there are no remap pools; the network fabric is off")
	}
	prefixes, err := ipam.ParsePrefixes("remap pool", pools)
	if err == nil {
		err = ipam.Space{Pools: prefixes}.Validate()
	}
	if err != nil {
		return status.Fail(name, "%v; run %s", err, setRemapPools)
	}
	for _, other := range []struct {
		what     string
		prefixes []netip.Prefix
	}{{"pod CIDR", pod}, {"service CIDR", svc}} {
		if p, q, clash := firstOverlap(prefixes, other.prefixes); clash {
			return status.Fail(name, "the remap pool %s overlaps the %s %s: peers' pods would get this cluster's addresses; run %s with a range this cluster does not use",
				p, other.what, q, setRemapPools)
		}
	}
	return status.OK(name, "the remap pools %s overlap neither the pod nor the service CIDR", strings.Join(pools, ", "))
}

// firstOverlap returns the first pair of a prefix of as and one of bs
// that overlap, masked, and whether there is one.
func firstOverlap(as, bs []netip.Prefix) (a, b string, found bool) {
	for _, p := range as {
		for _, q := range bs {
			if p.Overlaps(q) {
				return fmt.Sprint(p.Masked()), fmt.Sprint(q.Masked()), true
			}
		}
	}
	return "", "", false
}
