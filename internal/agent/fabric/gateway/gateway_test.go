package gateway

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/kubectl-offload/kubectl-offload/internal/nftexpr"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/netlab"
)

// The addresses of the lab. Both clusters use 10.244.0.0/16: the consumer
// sees the provider's pods as 10.70.0.0/16, the provider the consumer's
// as 10.71.0.0/16.
const (
	podCIDR      = "10.244.0.0/16"
	consumerView = "10.70.0.0/16" // the consumer's view of the provider
	providerView = "10.71.0.0/16" // the provider's view of the consumer
	underlayMTU  = 1280           // lowered, as behind a VPN or a cloud MTU
)

func TestGatewaysConnectTwoClustersWithTheSamePodCIDR(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	l := newLab(t)

	// The consumer: a node, two pods and the gateway pod.
	cn := l.Node("cn")
	pn := l.Node("pn")
	l.Sh("ip", "link", "add", "ul", "netns", cn, "mtu", fmt.Sprint(underlayMTU), "type", "veth", "peer", "name", "ul", "netns", pn, "mtu", fmt.Sprint(underlayMTU))
	for ns, addr := range map[string]string{cn: "10.98.0.1/30", pn: "10.98.0.2/30"} {
		l.Sh("ip", "-n", ns, "addr", "add", addr, "dev", "ul")
		l.Sh("ip", "-n", ns, "link", "set", "ul", "up")
	}
	cpod := l.Pod(cn, "cpod", "10.244.1.5", underlayMTU)
	cpod2 := l.Pod(cn, "cpod2", "10.244.1.6", underlayMTU)
	cgw := l.Pod(cn, "cgw", "10.244.1.9", underlayMTU)
	// The provider: the same pod addresses, one equal to the consumer
	// gateway's, a pod of another tenant and the gateway pod.
	ppod := l.Pod(pn, "ppod", "10.244.1.5", underlayMTU)
	ppod2 := l.Pod(pn, "ppod2", "10.244.1.9", underlayMTU)
	pother := l.Pod(pn, "pother", "10.244.3.3", underlayMTU)
	l.Pod(pn, "pgw", "10.244.2.9", underlayMTU)
	pgw := l.NS("pgw")

	// What the fabric DaemonSet does: each view via the gateway pod.
	l.Sh("ip", "-n", cn, "route", "add", consumerView, "via", "10.244.1.9")
	l.Sh("ip", "-n", pn, "route", "add", providerView, "via", "10.244.2.9")
	// And on the provider, for the mirror: the consumer's view of the
	// provider's pods, via the gateway pod too.
	l.Sh("ip", "-n", pn, "route", "add", consumerView, "via", "10.244.2.9")
	// What CNIs and kube-proxy do: pods leave the node masqueraded; the
	// provider publishes its gateway on a NodePort; the consumer has a
	// ClusterIP Service with a local and a remote endpoint.
	for _, ns := range []string{cn, pn} {
		l.NFT(ns, func(c *nftables.Conn, tb *nftables.Table) {
			post := netlab.NATChain(c, tb, nftables.ChainHookPostrouting, nftables.ChainPriorityNATSource)
			c.AddRule(&nftables.Rule{Table: tb, Chain: post, Exprs: nftexpr.Rule(nftexpr.Interface(false, "ul", true),
				nftexpr.MatchPrefix(nftexpr.Source, netip.MustParsePrefix(podCIDR)), nftexpr.Masquerade())})
		})
	}
	l.NFT(pn, func(c *nftables.Conn, tb *nftables.Table) {
		pre := netlab.NATChain(c, tb, nftables.ChainHookPrerouting, nftables.ChainPriorityNATDest)
		c.AddRule(&nftables.Rule{Table: tb, Chain: pre, Exprs: nftexpr.Rule(nftexpr.Interface(true, "ul", true),
			nftexpr.Protocol(unix.IPPROTO_UDP), nftexpr.DestinationPort(31820), nftexpr.DNAT(netip.MustParseAddr("10.244.2.9"), 51820))})
	})
	l.NFT(cn, func(c *nftables.Conn, tb *nftables.Table) {
		pre := netlab.NATChain(c, tb, nftables.ChainHookPrerouting, nftables.ChainPriorityNATDest)
		for _, r := range sourcePortParity(netip.MustParseAddr("10.0.0.50"), 8080, netip.MustParseAddr("10.244.1.6"), netip.MustParseAddr("10.70.1.5")) {
			c.AddRule(&nftables.Rule{Table: tb, Chain: pre, Exprs: r})
		}
	})
	for ns, name := range map[string]string{cpod: "cpod", cpod2: "cpod2", ppod: "ppod", ppod2: "ppod2", pother: "pother"} {
		l.Serve(ns, name)
	}

	// Without gateways nothing crosses: whatever passes later is theirs.
	if out, err := netlab.Call(cpod, "10.70.1.5:8080", 0); err == nil {
		t.Fatalf("before any gateway runs, the consumer pod reached the provider's: %q", out)
	}

	ckey, cpub := key(t, l.dir, "consumer")
	pkey, ppub := key(t, l.dir, "provider")
	consumer := &Config{
		Role: RoleClient, Interface: l.Prefix + "c", Implementation: ImplementationAuto,
		PrivateKeyFile: ckey, PeerPublicKey: ppub, PeerEndpoint: "10.98.0.2:31820",
		LocalPodCIDRs: []netip.Prefix{netip.MustParsePrefix(podCIDR)},
		Peer:          []Mapping{{Real: netip.MustParsePrefix(podCIDR), View: netip.MustParsePrefix(consumerView)}},
		// The consumer's filter: cpod's namespace is offloaded, cpod2's
		// is not.
		AllowedDestinations: []netip.Prefix{netip.MustParsePrefix("10.244.1.5/32")},
	}
	provider := &Config{
		Role: RoleServer, Interface: l.Prefix + "p", Implementation: ImplementationUserspace,
		PrivateKeyFile: pkey, PeerPublicKey: cpub, ListenPort: 51820,
		LocalPodCIDRs: []netip.Prefix{netip.MustParsePrefix(podCIDR)},
		Peer:          []Mapping{{Real: netip.MustParsePrefix(podCIDR), View: netip.MustParsePrefix(providerView)}},
		// The provider's tenant filter: only this consumer's pods.
		AllowedDestinations: []netip.Prefix{netip.MustParsePrefix("10.244.1.5/32"), netip.MustParsePrefix("10.244.1.9/32")},
		// The consumer's view of the provider's pods, mirrored.
		Mirror: []Mapping{{Real: netip.MustParsePrefix(podCIDR), View: netip.MustParsePrefix(consumerView)}},
	}
	l.startGateway("provider", pgw, provider)
	l.startGateway("consumer", cgw, consumer)
	t.Logf("tunnel up %v after the gateways started", l.waitConnected(30*time.Second, "consumer", "provider"))

	cst, err := l.status("consumer")
	if err != nil {
		t.Fatal(err)
	}
	pst, err := l.status("provider")
	if err != nil {
		t.Fatal(err)
	}
	t.Run("each side reports the tunnel", func(t *testing.T) {
		want := ImplementationUserspace
		if _, err := os.Stat("/sys/module/wireguard"); err == nil {
			want = ImplementationKernel
		}
		if cst.Implementation != want || pst.Implementation != ImplementationUserspace {
			t.Errorf("implementations: consumer %q (auto, want %q), provider %q (want userspace)", cst.Implementation, want, pst.Implementation)
		}
		if cst.Endpoint != "10.98.0.2:31820" {
			t.Errorf("the consumer's endpoint is %q, want the provider's NodePort 10.98.0.2:31820", cst.Endpoint)
		}
		if pst.Endpoint == "" || pst.ListenPort != 51820 {
			t.Errorf("the provider sees the consumer at %q and listens on %d", pst.Endpoint, pst.ListenPort)
		}
		if cst.MTU != underlayMTU-tunnelOverhead || pst.MTU != underlayMTU-tunnelOverhead {
			t.Errorf("MTUs: consumer %d, provider %d, want the path's %d minus %d", cst.MTU, pst.MTU, underlayMTU, tunnelOverhead)
		}
		for side, st := range map[string]Status{"consumer": cst, "provider": pst} {
			if time.Since(st.LastHandshake) > time.Minute {
				t.Errorf("%s: last handshake %v", side, st.LastHandshake)
			}
		}
	})

	t.Run("a consumer pod reaches a provider pod by its view, and the provider sees the consumer's view", func(t *testing.T) {
		expectAnswer(t, cpod, "10.70.1.5:8080", 0, "ppod 10.71.1.5")
	})
	t.Run("a provider pod reaches the consumer pod with the same IP", func(t *testing.T) {
		expectAnswer(t, ppod, "10.71.1.5:8080", 0, "cpod 10.70.1.5")
	})
	t.Run("a provider pod whose IP is the consumer gateway's is reached, and reaches back", func(t *testing.T) {
		expectAnswer(t, cpod, "10.70.1.9:8080", 0, "ppod2 10.71.1.5")
		expectAnswer(t, ppod2, "10.71.1.5:8080", 0, "cpod 10.70.1.9")
	})
	t.Run("a ClusterIP with a local and a remote endpoint answers from both", func(t *testing.T) {
		expectAnswer(t, cpod, "10.0.0.50:8080", 40100, "cpod2 10.244.1.5")
		expectAnswer(t, cpod, "10.0.0.50:8080", 40101, "ppod 10.71.1.5")
	})
	t.Run("a source outside the pod CIDR leaves as the gateway pod", func(t *testing.T) {
		expectAnswer(t, cn, "10.70.1.5:8080", 0, "ppod 10.71.1.9")
	})
	// dropped checks that a call from a namespace to an address fails, and
	// that the filter of the gateway on side counted it.
	dropped := func(t *testing.T, side, from, to string) {
		t.Helper()
		before, _ := l.status(side)
		if out, err := netlab.Call(from, to, 0); err == nil {
			t.Fatalf("%s reached %s: %q", from, to, out)
		}
		if after, _ := l.status(side); after.Filtered <= before.Filtered {
			t.Errorf("%s -> %s: the %s filter's counter did not grow: %d then %d", from, to, side, before.Filtered, after.Filtered)
		}
	}
	t.Run("the tenant filter drops a provider pod that is not allowed", func(t *testing.T) {
		expectAnswer(t, pn, "10.244.3.3:8080", 0, "pother 169.254.1.1") // it is alive
		dropped(t, "provider", cpod, "10.70.3.3:8080")
	})
	t.Run("the consumer's filter drops a provider pod's connection to a pod outside offloaded namespaces", func(t *testing.T) {
		expectAnswer(t, cpod, "10.244.1.6:8080", 0, "cpod2 10.244.1.5") // it is alive
		dropped(t, "consumer", ppod, "10.71.1.6:8080")
	})
	t.Run("the provider's own pods and nodes open no connection into the tunnel", func(t *testing.T) {
		dropped(t, "provider", pother, "10.71.1.5:8080")
		dropped(t, "provider", pn, "10.71.1.5:8080")
	})
	t.Run("a provider pod reaches another by the consumer's address of it, and is seen at its own", func(t *testing.T) {
		// Only the mirror makes 10.70.1.9 a provider pod on the provider,
		// and shows the caller 10.244.1.5 as 10.70.1.5.
		expectAnswer(t, ppod, "10.70.1.9:8080", 0, "ppod2 10.70.1.5")
		expectAnswer(t, ppod2, "10.70.1.5:8080", 0, "ppod 10.70.1.9")
	})
	t.Run("the mirror serves the tenant's pods only", func(t *testing.T) {
		dropped(t, "provider", pother, "10.70.1.5:8080") // another tenant's pod calls
		dropped(t, "provider", ppod, "10.70.3.3:8080")   // to another tenant's pod
	})
	t.Run("1 MiB crosses the lowered MTU both ways", func(t *testing.T) {
		want := netlab.Mebibyte()
		for _, c := range []struct{ from, to string }{{cpod, "10.70.1.5:8081"}, {ppod, "10.71.1.5:8081"}} {
			got, err := netlab.CallRaw(c.from, c.to, 0)
			if err != nil || !bytes.Equal(got, want) {
				t.Errorf("%s -> %s: %d bytes, equal %v, err %v", c.from, c.to, len(got), bytes.Equal(got, want), err)
			}
		}
	})
	t.Run("the traffic went through the tunnel", func(t *testing.T) {
		now, err := l.status("consumer")
		if err != nil {
			t.Fatal(err)
		}
		if now.RxBytes-cst.RxBytes < 1<<20 || now.TxBytes <= cst.TxBytes {
			t.Errorf("the consumer's tunnel counters: rx %d -> %d, tx %d -> %d; 1 MiB came in", cst.RxBytes, now.RxBytes, cst.TxBytes, now.TxBytes)
		}
		// The device's own packet counts grew on both sides, whichever
		// implementation runs it (the provider's is userspace).
		pnow, err := l.status("provider")
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			side        string
			before, now Status
		}{{"consumer", cst, now}, {"provider", pst, pnow}} {
			t.Logf("%s (%s): rx %d -> %d packets, tx %d -> %d", c.side, c.now.Implementation, c.before.RxPackets, c.now.RxPackets, c.before.TxPackets, c.now.TxPackets)
			if c.now.RxPackets <= c.before.RxPackets || c.now.TxPackets <= c.before.TxPackets {
				t.Errorf("the %s's tunnel device counted no traffic: rx %d -> %d packets, tx %d -> %d",
					c.side, c.before.RxPackets, c.now.RxPackets, c.before.TxPackets, c.now.TxPackets)
			}
		}
	})

	t.Run("the byte counters only grow, across a reload and a dropped session", func(t *testing.T) {
		before, err := l.status("consumer")
		if err != nil {
			t.Fatal(err)
		}
		grew := func(what string) {
			t.Helper()
			now, err := l.status("consumer")
			if err != nil {
				t.Fatal(err)
			}
			if now.RxBytes < before.RxBytes || now.TxBytes < before.TxBytes {
				t.Errorf("after %s the consumer's counters went back: rx %d -> %d, tx %d -> %d",
					what, before.RxBytes, now.RxBytes, before.TxBytes, now.TxBytes)
			}
		}
		// A reload updates the peer in place.
		reloaded := *consumer
		reloaded.MTU = before.MTU - 8
		l.writeConfig("consumer", &reloaded)
		defer l.writeConfig("consumer", consumer)
		if _, err := framework.Poll(t.Context(), 100*time.Millisecond, 30*time.Second, func(context.Context) (bool, string) {
			st, err := l.status("consumer")
			return err == nil && st.MTU == reloaded.MTU, fmt.Sprintf("MTU %d, %v", st.MTU, err)
		}); err != nil {
			t.Fatalf("the consumer's gateway did not reload its configuration: %v", err)
		}
		grew("a reload")
		// A partition long enough that the client drops the session and
		// adds the peer again, which alone zeroes the handshake time.
		l.Sh("ip", "-n", cn, "link", "set", "ul", "down")
		defer l.Sh("ip", "-n", cn, "link", "set", "ul", "up")
		if _, err := framework.Poll(t.Context(), 100*time.Millisecond, 30*time.Second, func(context.Context) (bool, string) {
			st, err := l.status("consumer")
			return err == nil && st.LastHandshake.IsZero(), fmt.Sprintf("last handshake %v, %v", st.LastHandshake, err)
		}); err != nil {
			t.Fatalf("the consumer's gateway did not drop the session of its unanswering peer: %v", err)
		}
		l.Sh("ip", "-n", cn, "link", "set", "ul", "up")
		if _, err := framework.Poll(t.Context(), 100*time.Millisecond, 30*time.Second, func(context.Context) (bool, string) {
			st, err := l.status("consumer")
			return err == nil && !st.LastHandshake.IsZero(), fmt.Sprintf("last handshake %v, %v", st.LastHandshake, err)
		}); err != nil {
			t.Fatalf("no new session after the partition healed: %v", err)
		}
		grew("a dropped session")
		// And the new session counts what crosses it.
		if before, err = l.status("consumer"); err != nil {
			t.Fatal(err)
		}
		if got, err := netlab.CallRaw(cpod, "10.70.1.5:8081", 0); err != nil || !bytes.Equal(got, netlab.Mebibyte()) {
			t.Fatalf("1 MiB through the new session: %d bytes, %v", len(got), err)
		}
		if now, err := l.status("consumer"); err != nil || now.RxBytes-before.RxBytes < 1<<20 {
			t.Errorf("1 MiB came in through the new session: rx %d -> %d, %v", before.RxBytes, now.RxBytes, err)
		}
	})

	t.Run("traffic recovers after a gateway crash and a restart", func(t *testing.T) {
		for _, c := range []struct {
			name string
			sig  syscall.Signal
		}{{"consumer", syscall.SIGKILL}, {"provider", syscall.SIGTERM}} {
			l.stop(c.name, c.sig)
			if _, err := netlab.Call(cpod, "10.70.1.5:8080", 0); err == nil {
				t.Fatalf("with the %s gateway stopped, traffic still crossed", c.name)
			}
			start := time.Now()
			p := l.gws[c.name]
			l.run(c.name, p.ns, p.config)
			took, err := framework.Poll(t.Context(), 50*time.Millisecond, 60*time.Second, func(context.Context) (bool, string) {
				out, err := netlab.Call(cpod, "10.70.1.5:8080", 0)
				return err == nil && out == "ppod 10.71.1.5", fmt.Sprintf("%q %v", out, err)
			})
			if err != nil {
				t.Fatalf("after the %s gateway's %v and restart: %v", c.name, c.sig, err)
			}
			t.Logf("recovery after the %s gateway's %v: %v from restart (%v in all)", c.name, c.sig, took, time.Since(start).Round(time.Millisecond))
		}
		// The restart after the crash replaced what the crashed process left.
		if err := netlab.InNetNS(cgw, func() error {
			n, err := countRules(markRulePriority)
			if err == nil && n != 1 {
				err = fmt.Errorf("%d rules at priority %d", n, markRulePriority)
			}
			return err
		}); err != nil {
			t.Error(err)
		}
	})

	t.Run("a stopped gateway leaves nothing in its namespace", func(t *testing.T) {
		for name, ns := range map[string]string{"consumer": cgw, "provider": pgw} {
			l.stop(name, syscall.SIGTERM)
			if err := netlab.InNetNS(ns, leftovers(l.gws[name].ns, map[string]string{"consumer": consumer.Interface, "provider": provider.Interface}[name])); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	})
}

func expectAnswer(t *testing.T, from, to string, sport int, want string) {
	t.Helper()
	out, err := netlab.Call(from, to, sport)
	if err != nil || out != want {
		t.Errorf("%s -> %s: answer %q, err %v; want %q", from, to, out, err, want)
	}
}

func countRules(priority int) (int, error) {
	rules, err := netlink.RuleList(unix.AF_INET)
	n := 0
	for _, r := range rules {
		if r.Priority == priority {
			n++
		}
	}
	return n, err
}

// leftovers checks the current namespace for anything of the gateway's.
func leftovers(ns, iface string) func() error {
	return func() error {
		var found []string
		c := &nftables.Conn{}
		if tables, err := c.ListTables(); err == nil {
			for _, tb := range tables {
				if tb.Name == tableName {
					found = append(found, "nftables table "+tb.Name)
				}
			}
		}
		if _, err := netlink.LinkByName(iface); err == nil {
			found = append(found, "device "+iface)
		}
		for _, p := range []int{markRulePriority, localRulePriority} {
			if n, _ := countRules(p); n > 0 {
				found = append(found, fmt.Sprintf("rule at priority %d", p))
			}
		}
		if n, _ := countRules(0); n != 1 {
			found = append(found, "the local table's rule is not back at priority 0")
		}
		if _, err := os.Stat("/var/run/wireguard/" + iface + ".sock"); err == nil {
			found = append(found, "UAPI socket of "+iface)
		}
		if len(found) > 0 {
			return fmt.Errorf("left in %s: %v", ns, found)
		}
		return nil
	}
}
