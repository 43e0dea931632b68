package ipam

import (
	"strings"
	"testing"
)

func TestAPeersPodCIDRsMustBePrivateBoundedAndFew(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ranges PeerRanges
		reals  []string
		want   string // in the error; "" for none
	}{
		{name: "kind's pod CIDR", reals: []string{"10.244.0.0/16"}},
		{name: "k3s's and RFC 6598", reals: []string{"10.42.0.0/16", "100.64.0.0/16"}},
		{name: "a 172.16/12 and a 192.168/16 block", reals: []string{"172.20.0.0/16", "192.168.10.0/24"}},
		{name: "cloud metadata", reals: []string{"169.254.169.254/32"}, want: "169.254.169.254/32 is a /32"},
		{name: "a link-local /16", reals: []string{"169.254.0.0/16"}, want: "outside the private ranges"},
		{name: "half the internet", reals: []string{"128.0.0.0/1"}, want: "is a /1"},
		{name: "a public /16", reals: []string{"8.8.0.0/16"}, want: "8.8.0.0/16 is outside the private ranges"},
		{name: "a private range wider than a /12", reals: []string{"10.0.0.0/8"}, want: "is a /8"},
		{name: "a block straddling a private range", reals: []string{"172.0.0.0/12"}, want: "outside"},
		{name: "a host address", reals: []string{"10.1.2.3/32"}, want: "is a /32"},
		{name: "IPv6", reals: []string{"fd00::/64"}, want: "not an IPv4 CIDR"},
		{name: "garbage", reals: []string{"x"}, want: "not an IPv4 CIDR"},
		{name: "nothing", reals: nil, want: "no pod CIDR"},
		{name: "too many", reals: strings.Split("10.1.0.0/16,10.2.0.0/16,10.3.0.0/16,10.4.0.0/16,10.5.0.0/16,10.6.0.0/16,10.7.0.0/16,10.8.0.0/16,10.9.0.0/16", ","), want: "9 pod CIDRs"},
		{name: "ranges the admin set replace the defaults", ranges: PeerRanges{Allowed: prefixes("10.244.0.0/16")}, reals: []string{"10.42.0.0/16"}, want: "10.244.0.0/16"},
		{name: "within the admin's range", ranges: PeerRanges{Allowed: prefixes("10.244.0.0/16")}, reals: []string{"10.244.0.0/16"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.ranges.Check(tc.reals)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("Check(%v) = %v, want accepted", tc.reals, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("Check(%v) = %v, want an error saying %q", tc.reals, err, tc.want)
			}
		})
	}
}
