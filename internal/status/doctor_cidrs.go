package status

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	"github.com/kubectl-offload/kubectl-offload/internal/ipam"
)

// The fixes of the CIDR checks.
const (
	setPodCIDR     = "kubectl offload upgrade --pod-cidr CIDR"
	setServiceCIDR = "kubectl offload upgrade --service-cidr CIDR"
	setRemapPools  = "kubectl offload upgrade --set 'network.remapPools={CIDR}'"
)

// cidrChecker checks that the pod and service CIDRs are set and that they
// and the remap pools do not overlap.
type cidrChecker struct{}

func (cidrChecker) Name() string { return "cidrs" }

func (cidrChecker) Check(_ context.Context, d *DoctorEnv) Section {
	s := Section{Title: "CIDRs"}
	rel, c := releaseOrCheck(d.Env)
	if c != nil {
		s.Checks = append(s.Checks, *c)
		return s
	}
	pod, svc, pools := cidrList(rel.Values, "podCIDR"), cidrList(rel.Values, "serviceCIDR"), cidrList(rel.Values, "remapPools")
	s.Fields = []Field{
		{Name: "podCIDR", Label: "Pod CIDR", Value: strings.Join(pod, ", ")},
		{Name: "serviceCIDR", Label: "Service CIDR", Value: strings.Join(svc, ", ")},
		{Name: "remapPools", Label: "Remap pools", Value: strings.Join(pools, ", ")},
	}
	s.Checks = cidrChecks(pod, svc, pools, boolValue(rel.Values, "network", "enabled"))
	return s
}

// cidrList reads network.NAME, a CIDR, a comma-separated list of them or
// a list, as single CIDRs.
func cidrList(values map[string]any, name string) []string {
	var out []string
	for _, v := range cidrValues(values, name) {
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
func cidrChecks(pod, svc, pools []string, fabric bool) []Check {
	var checks []Check
	podPrefixes, podOK := cidrPresence(&checks, "podCIDR", "pod CIDR", pod, setPodCIDR, fabric)
	svcPrefixes, svcOK := cidrPresence(&checks, "serviceCIDR", "service CIDR", svc, setServiceCIDR, false)
	if podOK && svcOK {
		if p, q, clash := firstOverlap(podPrefixes, svcPrefixes); clash {
			checks = append(checks, fail("podServiceOverlap", "the pod CIDR %s overlaps the service CIDR %s: one of them is wrong; run %s %s with this cluster's real ranges",
				p, q, setPodCIDR, strings.TrimPrefix(setServiceCIDR, "kubectl offload upgrade ")))
		} else {
			checks = append(checks, ok("podServiceOverlap", "the pod and service CIDRs do not overlap"))
		}
	}
	return append(checks, remapPoolsCheck(pools, podPrefixes, svcPrefixes, fabric))
}

// cidrPresence appends the check that the CIDRs of one kind are set and
// valid, and returns them parsed; valid is false when they are missing or
// one does not parse. required makes missing CIDRs a failure.
func cidrPresence(checks *[]Check, name, what string, cidrs []string, fix string, required bool) (_ []netip.Prefix, valid bool) {
	if len(cidrs) == 0 {
		if required {
			*checks = append(*checks, fail(name, "the %s is not set, and the network fabric needs it: run %s", what, fix))
		} else {
			*checks = append(*checks, warn(name, "the %s is not set: peers cannot tell when theirs overlaps this cluster's; run %s", what, fix))
		}
		return nil, false
	}
	prefixes, err := ipam.ParsePrefixes(what, cidrs)
	if err != nil {
		*checks = append(*checks, fail(name, "%v; run %s", err, fix))
		return nil, false
	}
	*checks = append(*checks, ok(name, "the %s is %s", what, strings.Join(cidrs, ", ")))
	return prefixes, true
}

// remapPoolsCheck judges the remap pools: valid, apart from each other,
// and clear of the pod and service CIDRs.
func remapPoolsCheck(pools []string, pod, svc []netip.Prefix, fabric bool) Check {
	const name = "remapPools"
	if len(pools) == 0 {
		if fabric {
			return warn(name, "there are no remap pools: a peer whose pod CIDR overlaps this cluster's cannot be reached; run %s", setRemapPools)
		}
		return ok(name, "there are no remap pools; the network fabric is off")
	}
	prefixes, err := ipam.ParsePrefixes("remap pool", pools)
	if err == nil {
		err = ipam.Space{Pools: prefixes}.Validate()
	}
	if err != nil {
		return fail(name, "%v; run %s", err, setRemapPools)
	}
	for _, other := range []struct {
		what     string
		prefixes []netip.Prefix
	}{{"pod CIDR", pod}, {"service CIDR", svc}} {
		if p, q, clash := firstOverlap(prefixes, other.prefixes); clash {
			return fail(name, "the remap pool %s overlaps the %s %s: peers' pods would get this cluster's addresses; run %s with a range this cluster does not use",
				p, other.what, q, setRemapPools)
		}
	}
	return ok(name, "the remap pools %s overlap neither the pod nor the service CIDR", strings.Join(pools, ", "))
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
