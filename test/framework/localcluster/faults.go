package localcluster

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/kubectl-offload/kubectl-offload/internal/nftexpr"
	"github.com/kubectl-offload/kubectl-offload/test/framework/machine"
)

// faultsTable is the host's nftables table of injected faults; removing it
// removes them all.
const faultsTable = "offload-test-faults"

// injectFault adds the rules of one fault to the host, in an nftables
// table of its own (faultsTable-name), and returns the function that
// removes them, which also runs when the test ends. hook is where the
// rules drop packets: the forward hook for traffic between nodes, the
// input hook for the host's own addresses (the API servers).
func injectFault(t testing.TB, name string, hooks []*nftables.ChainHook, rules ...[]expr.Any) (restore func()) {
	t.Helper()
	table := faultsTable + "-" + name
	err := machine.WithHostLock(func() error {
		c := &nftables.Conn{}
		tbl := nftexpr.DeleteTable(c, table)
		c.AddTable(tbl)
		for i, hook := range hooks {
			chain := c.AddChain(&nftables.Chain{
				Name: fmt.Sprintf("drop-%d", i), Table: tbl, Type: nftables.ChainTypeFilter,
				// Ahead of the isolation, which accepts node traffic.
				Hooknum: hook, Priority: nftables.ChainPriorityRef(*nftables.ChainPriorityFilter - 10),
			})
			for _, r := range rules {
				c.AddRule(&nftables.Rule{Table: tbl, Chain: chain, Exprs: r})
			}
		}
		if err := c.Flush(); err != nil {
			return fmt.Errorf("injecting fault %s: %w", name, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	done := false
	restore = func() {
		if done {
			return
		}
		done = true
		err := machine.WithHostLock(func() error {
			c := &nftables.Conn{}
			nftexpr.DeleteTable(c, table)
			return c.Flush()
		})
		if err != nil {
			t.Errorf("removing fault %s: %v", name, err)
		}
	}
	t.Cleanup(restore)
	return restore
}

// DropUDP makes the host drop the UDP datagrams it forwards to dst, as a
// firewall between two machines would: between real nodes, whose traffic
// the host routes, the path to dst is cut. It returns the function that
// lets them through again, which also runs when the test ends.
func DropUDP(t testing.TB, dst netip.AddrPort) (restore func()) {
	t.Helper()
	return injectFault(t, "udp", []*nftables.ChainHook{nftables.ChainHookForward}, nftexpr.Rule(
		nftexpr.MatchPrefix(nftexpr.Destination, netip.PrefixFrom(dst.Addr(), 32)),
		nftexpr.Protocol(unix.IPPROTO_UDP), nftexpr.DestinationPort(dst.Port()),
		nftexpr.Verdict(expr.VerdictDrop)))
}

// Partition cuts the network between the real nodes of a and b, both ways,
// as between two machines whose link went down: their nodes and pods no
// longer reach each other, nor the other's API server (packets are
// dropped, so connections hang rather than fail). Each cluster keeps its
// own API server, and the test process reaches both. It returns the
// function that heals the partition, which also runs when the test ends.
func Partition(t testing.TB, a, b *Cluster) (heal func()) {
	t.Helper()
	subnet := func(c *Cluster) netip.Prefix {
		if c.Node == nil {
			t.Fatalf("cluster %s has no real node to partition", c.Name)
		}
		return netip.PrefixFrom(netip.MustParseAddr(c.Node.HostIP), 24).Masked()
	}
	aNet, bNet := subnet(a), subnet(b)
	drop := func(from, to netip.Prefix) []expr.Any {
		return nftexpr.Rule(nftexpr.MatchPrefix(nftexpr.Source, from), nftexpr.MatchPrefix(nftexpr.Destination, to), nftexpr.Verdict(expr.VerdictDrop))
	}
	// Forwarded: node to node, pod to pod. Input: to the API server, which
	// listens on the host end of the other cluster's node subnet.
	return injectFault(t, "partition", []*nftables.ChainHook{nftables.ChainHookForward, nftables.ChainHookInput},
		drop(aNet, bNet), drop(bNet, aNet))
}

// FreezeAPIServer stops the cluster's kube-apiserver with SIGSTOP, as a
// hung API server or a network that drops packets would: connections open
// and requests hang, nothing is refused. It returns the function that
// lets it run again (SIGCONT) and waits until it answers, which also runs
// when the test ends.
func (c *Cluster) FreezeAPIServer(t testing.TB) (thaw func()) {
	t.Helper()
	pid, ok := c.PIDs()["kube-apiserver"]
	if !ok {
		t.Fatalf("cluster %s: no kube-apiserver PID among %v", c.Name, c.PIDs())
	}
	if err := unix.Kill(pid, unix.SIGSTOP); err != nil {
		t.Fatalf("freezing the kube-apiserver of %s: %v", c.Name, err)
	}
	done := false
	thaw = func() {
		if done {
			return
		}
		done = true
		if err := unix.Kill(pid, unix.SIGCONT); err != nil {
			t.Errorf("thawing the kube-apiserver of %s: %v", c.Name, err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if err := c.waitReady(ctx); err != nil {
			t.Errorf("the kube-apiserver of %s after thawing: %v", c.Name, err)
		}
	}
	t.Cleanup(thaw)
	return thaw
}
