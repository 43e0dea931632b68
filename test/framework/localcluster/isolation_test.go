package localcluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/google/nftables"

	"github.com/kubectl-offload/kubectl-offload/test/framework/machine"
	"github.com/kubectl-offload/kubectl-offload/test/framework/netlab"
)

// echoServer listens on every address of namespace ns and answers "ok".
func echoServer(t *testing.T, ns string) int {
	t.Helper()
	var l net.Listener
	if err := netlab.InNetNS(ns, func() (err error) {
		l, err = net.Listen("tcp4", "0.0.0.0:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, "ok")
			_ = c.Close()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port
}

// reach tells whether a TCP connection from namespace ns ("" for the
// host) to addr gets the server's answer.
func reach(ns, addr string) error {
	dial := func() error {
		c, err := net.DialTimeout("tcp4", addr, time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Second))
		b, err := io.ReadAll(c)
		if err != nil || string(b) != "ok" {
			return fmt.Errorf("answer %q: %v", b, err)
		}
		return nil
	}
	if ns == "" {
		return dial()
	}
	return netlab.InNetNS(ns, dial)
}

func TestIsolatedClustersReachEachOthersNodesButNotTheirPods(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("node networks need root")
	}
	ctx := context.Background()
	nodes := make([]*RealNode, 2)
	for i := range nodes {
		n, err := nodeNetwork(ctx, t.TempDir(), nil, FlavourKubeadm.spec().nodePodCIDR)
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = n
		t.Cleanup(func() {
			if _, err := machine.Run(context.Background(), "ip", "netns", "delete", n.NetNS); err != nil {
				t.Error(err)
			}
			if err := removeIsolation(n.NetNS); err != nil {
				t.Error(err)
			}
			if err := machine.ReleaseHostState(); err != nil {
				t.Error(err)
			}
		})
	}
	a, b := nodes[0], nodes[1]
	// A pod address of b's: the host routes b's pod range through b's node.
	podIP := b.PodCIDR[:len(b.PodCIDR)-len("0/24")] + "10"
	if _, err := machine.Run(ctx, "ip", "-n", b.NetNS, "addr", "add", podIP+"/32", "dev", "lo"); err != nil {
		t.Fatal(err)
	}
	port := echoServer(t, b.NetNS)
	pod, node := net.JoinHostPort(podIP, fmt.Sprint(port)), net.JoinHostPort(b.IP, fmt.Sprint(port))

	// Without isolation, the host forwards between the clusters: a network
	// test on this host would pass with no fabric at all.
	for _, target := range []string{pod, node} {
		if err := reach(a.NetNS, target); err != nil {
			t.Fatalf("before isolation, %s cannot reach %s: %v", a.NetNS, target, err)
		}
	}

	iso, err := isolationOf(b, []*RealNode{b}, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := iso.apply(); err != nil {
		t.Fatal(err)
	}
	if err := iso.apply(); err != nil { // idempotent, as after a crash
		t.Fatal(err)
	}
	if err := reach(a.NetNS, pod); err == nil {
		t.Errorf("isolated: another cluster's node reaches pod %s", pod)
	}
	if err := reach(a.NetNS, node); err != nil {
		t.Errorf("isolated: another cluster's node cannot reach node %s: %v", node, err)
	}
	if err := reach("", pod); err != nil {
		t.Errorf("isolated: the host (where the API servers run) cannot reach pod %s: %v", pod, err)
	}

	if err := removeIsolation(b.NetNS); err != nil {
		t.Fatal(err)
	}
	if err := reach(a.NetNS, pod); err != nil {
		t.Errorf("after removing the isolation, %s cannot reach %s: %v", a.NetNS, pod, err)
	}
	// Nothing of b's is left; the table goes with its last rule (another
	// local cluster on this host may still have rules in it).
	c := &nftables.Conn{}
	table := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: isolationTable}
	if _, err := c.ListChain(table, isolationChain); err == nil {
		rules, err := c.GetRules(table, &nftables.Chain{Name: isolationChain, Table: table})
		if err != nil {
			t.Fatal(err)
		}
		if len(rules) == 0 {
			t.Errorf("nftables table %s is left after its last rules went", isolationTable)
		}
		for _, r := range rules {
			if string(r.UserData) == b.NetNS {
				t.Errorf("a rule of %s is left in table %s", b.NetNS, isolationTable)
			}
		}
	}
}
