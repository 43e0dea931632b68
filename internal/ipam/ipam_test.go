package ipam

import (
	"net/netip"
	"strings"
	"testing"
)

func prefixes(s ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(s))
	for i, c := range s {
		out[i] = netip.MustParsePrefix(c)
	}
	return out
}

func TestViewsAreTheFirstFreeBlockOfTheSameSizeInThePools(t *testing.T) {
	local := prefixes("10.244.0.0/16", "10.96.0.0/12", "10.99.0.0/24")
	for _, tc := range []struct {
		name  string
		space Space
		real  string
		want  string
	}{
		{"a CIDR that clashes with nothing known here is remapped all the same",
			Space{Pools: prefixes("10.64.0.0/12"), Reserved: local}, "10.42.0.0/16", "10.64.0.0/16"},
		{"a CIDR inside the pool gets a block of the pool like any other",
			Space{Pools: prefixes("10.64.0.0/12"), Reserved: local, Taken: prefixes("10.64.0.0/16")}, "10.66.0.0/16", "10.65.0.0/16"},
		{"the same CIDR as ours is remapped into the pool",
			Space{Pools: prefixes("10.64.0.0/12"), Reserved: local}, "10.244.0.0/16", "10.64.0.0/16"},
		{"a CIDR overlapping our service CIDR is remapped",
			Space{Pools: prefixes("10.64.0.0/12"), Reserved: local}, "10.100.0.0/16", "10.64.0.0/16"},
		{"another peer's view is skipped",
			Space{Pools: prefixes("10.64.0.0/12"), Reserved: local, Taken: prefixes("10.64.0.0/16")}, "10.244.0.0/16", "10.65.0.0/16"},
		{"a real CIDR equal to another peer's view is remapped",
			Space{Pools: prefixes("10.64.0.0/12"), Reserved: local, Taken: prefixes("10.42.0.0/16")}, "10.42.0.0/16", "10.64.0.0/16"},
		{"a pool too small for the CIDR is skipped for the next",
			Space{Pools: prefixes("10.64.0.0/20", "10.80.0.0/12"), Reserved: local}, "10.244.0.0/16", "10.80.0.0/16"},
		{"a reserved range inside the pool is skipped",
			Space{Pools: prefixes("10.64.0.0/12"), Reserved: append(prefixes("10.64.0.0/24"), local...)}, "10.244.0.0/16", "10.65.0.0/16"},
		{"a host address is masked first",
			Space{Pools: prefixes("10.64.0.0/12"), Reserved: local}, "10.244.1.7/16", "10.64.0.0/16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.space.View(netip.MustParsePrefix(tc.real))
			if err != nil || got.String() != tc.want {
				t.Errorf("View(%s) = %v, %v; want %s", tc.real, got, err, tc.want)
			}
		})
	}
}

func TestAFullPoolSaysWhatClashesAndWhatToDo(t *testing.T) {
	s := Space{Pools: prefixes("10.64.0.0/15"), Reserved: prefixes("10.244.0.0/16"), Taken: prefixes("10.64.0.0/16", "10.65.0.0/16")}
	_, err := s.View(netip.MustParsePrefix("10.244.0.0/16"))
	if err == nil {
		t.Fatal("a full pool gave a view")
	}
	for _, want := range []string{"no free /16", "10.64.0.0/15", "10.244.0.0/16", "network.remapPools"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if v, err := (Space{}).View(netip.MustParsePrefix("10.244.0.0/16")); err == nil {
		t.Errorf("with no pool, a CIDR got the view %v: it must never be its own", v)
	}
	s = Space{Pools: prefixes("10.64.0.0/12")}
	if !s.InPools(netip.MustParsePrefix("10.65.0.0/16")) || s.InPools(netip.MustParsePrefix("10.244.0.0/16")) || s.InPools(netip.MustParsePrefix("10.0.0.0/8")) {
		t.Error("InPools is wrong about 10.65.0.0/16, 10.244.0.0/16 or 10.0.0.0/8 against the pool 10.64.0.0/12")
	}
}

func TestViewsOfSeveralCIDRsDoNotOverlapEachOther(t *testing.T) {
	s := Space{Pools: prefixes("10.64.0.0/12"), Reserved: prefixes("10.244.0.0/16", "10.245.0.0/16")}
	got, err := s.Views(prefixes("10.244.0.0/16", "10.245.0.0/16"))
	if err != nil || len(got) != 2 || got[0].String() != "10.64.0.0/16" || got[1].String() != "10.65.0.0/16" {
		t.Errorf("Views = %v, %v", got, err)
	}
	if len(s.Taken) != 0 {
		t.Errorf("Views changed the caller's Taken: %v", s.Taken)
	}
}

func TestValidateRefusesOverlappingOrMisalignedPools(t *testing.T) {
	for _, tc := range []struct {
		pools []string
		want  string
	}{
		{[]string{"10.64.0.0/12", "10.70.0.0/16"}, "overlap"},
		{[]string{"10.64.1.0/12"}, "not an IPv4 network address"},
		{[]string{"10.64.0.0/12", "10.80.0.0/12"}, ""},
		{nil, "no remap pool is set"},
	} {
		var pools []netip.Prefix
		for _, p := range tc.pools {
			pools = append(pools, netip.MustParsePrefix(p))
		}
		err := Space{Pools: pools}.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("pools %v: %v, want %q", tc.pools, err, tc.want)
		}
	}
	if _, err := ParsePrefixes("remap pool", []string{"10.64.0.0/12", "ten"}); err == nil || !strings.Contains(err.Error(), `remap pool "ten"`) {
		t.Errorf("ParsePrefixes: %v", err)
	}
}
