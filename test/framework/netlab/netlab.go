// Package netlab is the network lab of the local clusters: network
// namespaces and veths that stand in for separate machines, running a
// function inside a namespace, and free ports.
package netlab

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"
)

// NetLab builds test hosts in network namespaces without Kubernetes: nodes
// that forward, pods wired to them as a routed CNI does (a veth, a /32, a
// default route through a link-local address on the node), and servers
// that say who called. Every namespace is deleted when the test ends.
type NetLab struct {
	T testing.TB
	// Prefix starts every namespace name of this lab, unique per run.
	Prefix string
}

// NewNetLab returns a lab whose namespaces start with prefix and a random
// suffix.
func NewNetLab(t testing.TB, prefix string) *NetLab {
	b := make([]byte, 2)
	_, _ = rand.Read(b)
	return &NetLab{T: t, Prefix: prefix + hex.EncodeToString(b)}
}

// NS is the full name of the lab's namespace short.
func (l *NetLab) NS(short string) string { return l.Prefix + "-" + short }

// Sh runs a command and fails the test with its output when it fails.
func (l *NetLab) Sh(args ...string) {
	l.T.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		l.T.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// AddNS creates a namespace with loopback up; the test deletes it.
func (l *NetLab) AddNS(short string) string {
	l.T.Helper()
	ns := l.NS(short)
	l.Sh("ip", "netns", "add", ns)
	l.T.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "delete", ns).CombinedOutput(); err != nil {
			l.T.Errorf("deleting namespace %s: %v: %s", ns, err, out)
		}
	})
	l.Sh("ip", "-n", ns, "link", "set", "lo", "up")
	return ns
}

// Sysctl sets key to value in namespace ns.
func (l *NetLab) Sysctl(ns, key, value string) {
	l.T.Helper()
	l.Sh("ip", "netns", "exec", ns, "sysctl", "-qw", key+"="+value)
}

// Node creates a node namespace that forwards.
func (l *NetLab) Node(short string) string {
	ns := l.AddNS(short)
	l.Sysctl(ns, "net.ipv4.ip_forward", "1")
	return ns
}

// Pod wires namespace short to node as a routed CNI does: a veth, the
// pod's /32, a default route through a link-local gateway address on the
// node's side.
func (l *NetLab) Pod(node, short, ip string, mtu int) string {
	ns := l.AddNS(short)
	veth := "v" + short
	l.Sh("ip", "link", "add", veth, "netns", node, "mtu", fmt.Sprint(mtu), "type", "veth", "peer", "name", "eth0", "netns", ns, "mtu", fmt.Sprint(mtu))
	l.Sh("ip", "-n", node, "addr", "add", "169.254.1.1/32", "dev", veth)
	l.Sh("ip", "-n", node, "link", "set", veth, "up")
	l.Sh("ip", "-n", node, "route", "add", ip+"/32", "dev", veth)
	l.Sh("ip", "-n", ns, "addr", "add", ip+"/32", "dev", "eth0")
	l.Sh("ip", "-n", ns, "link", "set", "eth0", "up")
	l.Sh("ip", "-n", ns, "route", "add", "169.254.1.1", "dev", "eth0")
	l.Sh("ip", "-n", ns, "route", "add", "default", "via", "169.254.1.1", "dev", "eth0")
	return ns
}

// NFT programs the node namespace ns with rules in table offload-lab.
func (l *NetLab) NFT(ns string, build func(c *nftables.Conn, t *nftables.Table)) {
	l.T.Helper()
	h, err := netns.GetFromName(ns)
	if err != nil {
		l.T.Fatal(err)
	}
	defer func() { _ = h.Close() }()
	c := &nftables.Conn{NetNS: int(h)}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: "offload-lab"})
	build(c, t)
	if err := c.Flush(); err != nil {
		l.T.Fatalf("programming the node %s: %v", ns, err)
	}
}

// NATChain adds a NAT base chain at hook and priority to table t.
func NATChain(c *nftables.Conn, t *nftables.Table, hook *nftables.ChainHook, prio *nftables.ChainPriority) *nftables.Chain {
	return c.AddChain(&nftables.Chain{Name: "nat" + fmt.Sprint(*prio), Table: t, Type: nftables.ChainTypeNAT, Hooknum: hook, Priority: prio})
}

// Serve runs, in namespace ns, a server on :8080 that answers
// "<name> <client address it sees>" and one on :8081 that sends 1 MiB.
func (l *NetLab) Serve(ns, name string) {
	l.T.Helper()
	l.Listen(ns, 8080, func(c net.Conn) {
		ip := c.RemoteAddr().(*net.TCPAddr).IP
		_, _ = fmt.Fprintf(c, "%s %s\n", name, ip)
	})
	l.Listen(ns, 8081, func(c net.Conn) { _, _ = c.Write(Mebibyte()) })
}

// Listen serves TCP port of every address of namespace ns with handle,
// one goroutine per connection, until the test ends.
func (l *NetLab) Listen(ns string, port int, handle func(net.Conn)) {
	l.T.Helper()
	var ln net.Listener
	if err := InNetNS(ns, func() (err error) {
		ln, err = net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", port))
		return err
	}); err != nil {
		l.T.Fatal(err)
	}
	l.T.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); handle(c) }()
		}
	}()
}

// Mebibyte is the 1 MiB that Serve sends on :8081.
func Mebibyte() []byte {
	b := make([]byte, 1<<20)
	for i := range b {
		b[i] = byte(i * 7 / 3)
	}
	return b
}

// Call connects from namespace ns to addr, from local port sport when
// non-zero, and returns the whole answer.
func Call(ns, addr string, sport int) (string, error) {
	b, err := CallRaw(ns, addr, sport)
	return strings.TrimSpace(string(b)), err
}

// CallRaw is Call without trimming the answer.
func CallRaw(ns, addr string, sport int) ([]byte, error) {
	var out []byte
	err := InNetNS(ns, func() error {
		d := net.Dialer{Timeout: 2 * time.Second}
		if sport != 0 {
			d.LocalAddr = &net.TCPAddr{Port: sport}
		}
		c, err := d.Dial("tcp4", addr)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		out, err = io.ReadAll(bufio.NewReader(c))
		return err
	})
	return out, err
}
