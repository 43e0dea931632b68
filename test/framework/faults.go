package framework

import (
	"fmt"
	"net/netip"
	"testing"

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
