package gateway

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

func validConfig(t *testing.T) *Config {
	t.Helper()
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	return &Config{
		Role: RoleClient, Interface: "offload0", PrivateKeyFile: "/key",
		PeerPublicKey: k.PublicKey().String(), PeerEndpoint: "192.0.2.1:31820",
		LocalPodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")},
		Peer:          []Mapping{{Real: netip.MustParsePrefix("10.244.0.0/16"), View: netip.MustParsePrefix("10.70.0.0/16")}},
	}
}

// mirror makes c a server that mirrors real as view.
func mirror(c *Config, real, view string) {
	c.Role, c.PeerEndpoint = RoleServer, ""
	c.Mirror = append(c.Mirror, Mapping{Real: netip.MustParsePrefix(real), View: netip.MustParsePrefix(view)})
}

func TestConfigValidationSaysWhatIsWrong(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(c *Config)
		want   string // a part of the error; empty: valid
	}{
		{"a valid client", func(*Config) {}, ""},
		{"a valid server", func(c *Config) { c.Role, c.PeerEndpoint = RoleServer, "" }, ""},
		{"a peer CIDR that clashes with nothing is seen as itself", func(c *Config) {
			c.Peer[0] = Mapping{Real: netip.MustParsePrefix("10.245.0.0/16"), View: netip.MustParsePrefix("10.245.0.0/16")}
		}, ""},
		{"an unknown role", func(c *Config) { c.Role = "router" }, `role "router"`},
		{"a server with an endpoint", func(c *Config) { c.Role = RoleServer }, "the server never dials"},
		{"a client without an endpoint", func(c *Config) { c.PeerEndpoint = "" }, "peerEndpoint"},
		{"an endpoint without a port", func(c *Config) { c.PeerEndpoint = "192.0.2.1" }, "not host:port"},
		{"an unknown implementation", func(c *Config) { c.Implementation = "ebpf" }, "use auto, kernel or userspace"},
		{"an interface name too long for the kernel", func(c *Config) { c.Interface = "offload-gateway-0" }, "1 to 15 characters"},
		{"a bad peer key", func(c *Config) { c.PeerPublicKey = "nope" }, "peerPublicKey"},
		{"an MTU below IPv4's minimum", func(c *Config) { c.MTU = 500 }, "mtu 500"},
		{"a view overlapping the local pod CIDR", func(c *Config) {
			c.Peer[0].View = netip.MustParsePrefix("10.244.0.0/16")
		}, "overlaps the local pod CIDR"},
		{"a view smaller than the real CIDR", func(c *Config) {
			c.Peer[0].View = netip.MustParsePrefix("10.70.0.0/24")
		}, "must be the size of the real CIDR"},
		{"two views that overlap", func(c *Config) {
			c.Peer = append(c.Peer, Mapping{Real: netip.MustParsePrefix("10.96.0.0/16"), View: netip.MustParsePrefix("10.70.0.0/16")})
		}, "overlaps peer[0]'s view"},
		{"a view that is not a network address", func(c *Config) {
			c.Peer[0].View = netip.MustParsePrefix("10.70.1.0/16")
		}, "must be network addresses"},
		{"a view on the tunnel's addresses", func(c *Config) {
			c.Peer[0] = Mapping{Real: netip.MustParsePrefix("10.1.0.0/16"), View: netip.MustParsePrefix("169.254.0.0/16")}
		}, "overlaps the tunnel's own"},
		{"an allowed destination outside the pod CIDRs", func(c *Config) {
			c.AllowedDestinations = []netip.Prefix{netip.MustParsePrefix("10.0.0.1/32")}
		}, "not inside the local pod CIDRs"},
		{"no local pod CIDR", func(c *Config) { c.LocalPodCIDRs = nil }, "localPodCIDRs is empty"},
		{"a server that mirrors its pods", func(c *Config) { mirror(c, "10.244.0.0/16", "10.71.0.0/16") }, ""},
		{"a client that mirrors", func(c *Config) {
			mirror(c, "10.244.0.0/16", "10.71.0.0/16")
			c.Role = RoleClient
		}, "only the server mirrors"},
		{"a mirror of a CIDR that is not a local pod CIDR", func(c *Config) { mirror(c, "10.96.0.0/16", "10.71.0.0/16") }, "not one of the local pod CIDRs"},
		{"a mirror of a part of a local pod CIDR", func(c *Config) { mirror(c, "10.244.1.0/24", "10.71.1.0/24") }, "not one of the local pod CIDRs"},
		{"a mirror view of another size", func(c *Config) { mirror(c, "10.244.0.0/16", "10.71.0.0/24") }, "of the same size"},
		{"a mirror view on the peer's view", func(c *Config) { mirror(c, "10.244.0.0/16", "10.70.0.0/16") }, "overlaps 10.70.0.0/16"},
		{"a mirror view on the local pods", func(c *Config) { mirror(c, "10.244.0.0/16", "10.244.0.0/16") }, "overlaps 10.244.0.0/16"},
		{"a mirror view on the tunnel's addresses", func(c *Config) {
			c.LocalPodCIDRs = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.1.0.0/16")}
			mirror(c, "10.1.0.0/16", "169.254.0.0/16")
		}, "overlaps 169.254.77.0/30"},
		{"two mirror views that overlap", func(c *Config) {
			c.LocalPodCIDRs = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.245.0.0/16")}
			mirror(c, "10.244.0.0/16", "10.71.0.0/16")
			mirror(c, "10.245.0.0/16", "10.71.0.0/16")
		}, "overlaps 10.71.0.0/16"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := validConfig(t)
			tc.change(c)
			c.Default()
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one that says %q", err, tc.want)
			}
		})
	}
}

func TestLoadConfigReadsJSONAndFillsDefaults(t *testing.T) {
	c := validConfig(t)
	c.Role, c.PeerEndpoint = RoleServer, ""
	b, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := LoadConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Implementation != ImplementationAuto || got.ListenPort != DefaultListenPort || got.KeepaliveSeconds != DefaultKeepaliveSeconds {
		t.Errorf("defaults: implementation %q, port %d, keepalive %d", got.Implementation, got.ListenPort, got.KeepaliveSeconds)
	}
	if got.Peer[0] != c.Peer[0] {
		t.Errorf("mapping %v, want %v", got.Peer[0], c.Peer[0])
	}
	if err := os.WriteFile(path, []byte(`{"role":"server"`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadConfig(path); err == nil || !strings.Contains(err.Error(), "parsing the gateway configuration") {
		t.Errorf("a truncated file: %v", err)
	}
}
