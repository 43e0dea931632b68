package nftexpr

import (
	"net/netip"
	"testing"

	"github.com/google/nftables"
)

func TestLastIsTheLastAddressOfAPrefix(t *testing.T) {
	for in, want := range map[string]string{
		"10.244.0.0/16": "10.244.255.255",
		"10.70.1.5/32":  "10.70.1.5",
		"0.0.0.0/0":     "255.255.255.255",
		"10.1.2.3/24":   "10.1.2.255",
	} {
		if got := Last(netip.MustParsePrefix(in)); got.String() != want {
			t.Errorf("Last(%s) = %v, want %s", in, got, want)
		}
	}
}

func TestIntervalElementsMergeOverlappingAndTouchingPrefixes(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []string
		want []string // start, end, start, end…; "end" elements are IntervalEnd
	}{
		{"one prefix", []string{"10.244.1.5/32"}, []string{"10.244.1.5", "10.244.1.6"}},
		{"unsorted, disjoint", []string{"10.244.3.0/24", "10.244.1.0/24"}, []string{"10.244.1.0", "10.244.2.0", "10.244.3.0", "10.244.4.0"}},
		{"contained", []string{"10.244.0.0/16", "10.244.1.5/32"}, []string{"10.244.0.0", "10.245.0.0"}},
		{"touching", []string{"10.244.1.0/25", "10.244.1.128/25"}, []string{"10.244.1.0", "10.244.2.0"}},
		{"up to the last address has no end", []string{"255.255.255.0/24"}, []string{"255.255.255.0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var in []netip.Prefix
			for _, s := range tc.in {
				in = append(in, netip.MustParsePrefix(s))
			}
			got := IntervalElements(in)
			if len(got) != len(tc.want) {
				t.Fatalf("got %d elements %v, want %v", len(got), render(got), tc.want)
			}
			for i, e := range got {
				a := netip.AddrFrom4([4]byte(e.Key))
				if a.String() != tc.want[i] || e.IntervalEnd != (i%2 == 1) {
					t.Errorf("element %d: %v (end %v), want %s (end %v)", i, a, e.IntervalEnd, tc.want[i], i%2 == 1)
				}
			}
		})
	}
}

func render(els []nftables.SetElement) []string {
	var out []string
	for _, e := range els {
		out = append(out, netip.AddrFrom4([4]byte(e.Key)).String())
	}
	return out
}
