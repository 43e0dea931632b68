package localcluster

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/kubectl-offload/kubectl-offload/internal/nftexpr"
	"github.com/kubectl-offload/kubectl-offload/test/framework/machine"
)

// The host's nftables objects that isolate local clusters. The table is
// the harness's own, so removing it removes exactly what it added.
const (
	isolationTable = "offload-test-isolation"
	isolationChain = "forward"
)

// isolation is what makes one real node's cluster as isolated as a separate
// machine: the host forwards to its pod ranges only packets from its own
// members (its node subnets and pod ranges). Node addresses stay reachable
// from everywhere, and so do the API servers, which run on the host and
// reach pods through its output path, not its forward path.
type isolation struct {
	// key tags the node's rules (its network namespace name, unique on the host).
	key string
	// members may reach pods; pods are the ranges protected.
	members, pods []netip.Prefix
	// lan is the bridge of the cluster's nodes, if it has several: what it
	// switches between them is the cluster's own traffic, which the host's
	// br_netfilter would otherwise put through these rules.
	lan string
}

// isolationOf is the isolation of real node n of a cluster whose real
// nodes are cluster (n among them): its pods take traffic from those nodes
// and their pods.
func isolationOf(n *RealNode, cluster []*RealNode, lan string) (isolation, error) {
	iso := isolation{key: n.NetNS, lan: lan}
	for _, m := range cluster {
		node, err := netip.ParsePrefix(m.IP + "/24")
		if err != nil {
			return isolation{}, err
		}
		pods, err := netip.ParsePrefix(m.PodCIDR)
		if err != nil {
			return isolation{}, err
		}
		iso.members = append(iso.members, node.Masked(), pods)
		if m == n {
			iso.pods = []netip.Prefix{pods}
		}
	}
	return iso, nil
}

// apply installs the rules of iso in the host's forward path, replacing
// any it left before (a crashed run).
func (iso isolation) apply() error {
	return machine.WithHostLock(func() error {
		c := &nftables.Conn{}
		table := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: isolationTable})
		chain := c.AddChain(&nftables.Chain{
			Name: isolationChain, Table: table, Type: nftables.ChainTypeFilter,
			Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter,
		})
		if err := c.Flush(); err != nil {
			return fmt.Errorf("creating nftables table %s: %w", isolationTable, err)
		}
		if err := deleteRules(c, table, chain, iso.key); err != nil {
			return err
		}
		if iso.lan != "" {
			c.AddRule(&nftables.Rule{Table: table, Chain: chain, UserData: []byte(iso.key),
				Exprs: nftexpr.Rule(nftexpr.Interface(true, iso.lan, true), nftexpr.Interface(false, iso.lan, true), nftexpr.Verdict(expr.VerdictAccept))})
		}
		for _, p := range iso.pods {
			// Members pass; everyone else is dropped.
			for _, m := range iso.members {
				c.AddRule(&nftables.Rule{Table: table, Chain: chain, UserData: []byte(iso.key),
					Exprs: nftexpr.Rule(nftexpr.MatchPrefix(nftexpr.Destination, p), nftexpr.MatchPrefix(nftexpr.Source, m), nftexpr.Verdict(expr.VerdictAccept))})
			}
			c.AddRule(&nftables.Rule{Table: table, Chain: chain, UserData: []byte(iso.key),
				Exprs: nftexpr.Rule(nftexpr.MatchPrefix(nftexpr.Destination, p), nftexpr.Verdict(expr.VerdictDrop))})
		}
		if err := c.Flush(); err != nil {
			return fmt.Errorf("isolating the pods of %s: %w", iso.key, err)
		}
		return nil
	})
}

// removeIsolation deletes the rules of key, and the table once it holds
// none. A host without the table is fine.
func removeIsolation(key string) error {
	return machine.WithHostLock(func() error {
		c := &nftables.Conn{}
		table := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: isolationTable}
		chain := &nftables.Chain{Name: isolationChain, Table: table}
		if _, err := c.ListChain(table, isolationChain); err != nil {
			return nil // no table, nothing to remove
		}
		if err := deleteRules(c, table, chain, key); err != nil {
			return err
		}
		rules, err := c.GetRules(table, chain)
		if err != nil {
			return fmt.Errorf("listing nftables table %s: %w", isolationTable, err)
		}
		if len(rules) == 0 {
			c.DelTable(table)
			if err := c.Flush(); err != nil {
				return fmt.Errorf("deleting nftables table %s: %w", isolationTable, err)
			}
		}
		return nil
	})
}

// deleteRules deletes the rules of chain tagged with key.
func deleteRules(c *nftables.Conn, table *nftables.Table, chain *nftables.Chain, key string) error {
	rules, err := c.GetRules(table, chain)
	if err != nil {
		return fmt.Errorf("listing nftables table %s: %w", isolationTable, err)
	}
	var errs []error
	for _, r := range rules {
		if string(r.UserData) == key {
			errs = append(errs, c.DelRule(r))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("removing the isolation of %s: %w", key, err)
	}
	return nil
}
