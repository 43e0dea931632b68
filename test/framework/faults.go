package framework

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
)

// faultsTable is the host's nftables table of injected faults; removing it
// removes them all.
const faultsTable = "offload-test-faults"

// DropUDP makes the host drop the UDP datagrams it forwards to dst, as a
// firewall between two machines would: between real nodes, whose traffic
// the host routes, the path to dst is cut. It returns the function that
// lets them through again, which also runs when the test ends.
func DropUDP(t testing.TB, dst netip.AddrPort) (restore func()) {
	t.Helper()
	err := withHostLock(func() error {
		c := &nftables.Conn{}
		table := nftexpr.DeleteTable(c, faultsTable)
		c.AddTable(table)
		chain := c.AddChain(&nftables.Chain{
			Name: "forward", Table: table, Type: nftables.ChainTypeFilter,
			// Ahead of the isolation, which accepts node traffic.
			Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityRef(*nftables.ChainPriorityFilter - 10),
		})
		c.AddRule(&nftables.Rule{Table: table, Chain: chain, Exprs: nftexpr.Rule(
			nftexpr.MatchPrefix(nftexpr.Destination, netip.PrefixFrom(dst.Addr(), 32)),
			nftexpr.Protocol(unix.IPPROTO_UDP), nftexpr.DestinationPort(dst.Port()),
			nftexpr.Verdict(expr.VerdictDrop))})
		if err := c.Flush(); err != nil {
			return fmt.Errorf("dropping UDP to %s: %w", dst, err)
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
		err := withHostLock(func() error {
			c := &nftables.Conn{}
			nftexpr.DeleteTable(c, faultsTable)
			return c.Flush()
		})
		if err != nil {
			t.Errorf("letting UDP to %s through again: %v", dst, err)
		}
	}
	t.Cleanup(restore)
	return restore
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
