package gateway

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
	"k8s.io/klog/v2/textlogger"

	"github.com/kubectl-offload/kubectl-offload/internal/nftexpr"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

// The lab: two emulated clusters in network namespaces, each a node with
// pods behind veths (the way a routed CNI wires them), joined only by an
// underlay link between the nodes. Both use the same pod CIDR, so nothing
// crosses unless a gateway translates it. The gateways are this test
// binary re-executed inside their pod's namespace (childEnv), running the
// same Gateway.Run as offload-agent gateway.

const childEnv = "OFFLOAD_TEST_GATEWAY_CONFIG"

func TestMain(m *testing.M) {
	if cfg := os.Getenv(childEnv); cfg != "" {
		os.Exit(runChild(cfg))
	}
	os.Exit(framework.RunWithAPIServer(m))
}

// runChild is the gateway process of the lab.
func runChild(cfg string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	log := textlogger.NewLogger(textlogger.NewConfig(textlogger.Output(os.Stderr)))
	g := New(Options{ConfigFile: cfg, HealthProbeBindAddress: "127.0.0.1:8083", ReloadInterval: 200 * time.Millisecond}, log)
	if err := g.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "Error:", err)
		return 1
	}
	return 0
}

// lab is one run's namespaces and gateway processes.
type lab struct {
	t      *testing.T
	prefix string
	dir    string
	gws    map[string]*gatewayProc
}

type gatewayProc struct {
	ns, config string
	cmd        *exec.Cmd
	log        *os.File
}

func newLab(t *testing.T) *lab {
	t.Helper()
	b := make([]byte, 2)
	_, _ = rand.Read(b)
	l := &lab{t: t, prefix: "gwl" + hex.EncodeToString(b), dir: t.TempDir(), gws: map[string]*gatewayProc{}}
	return l
}

// ns is the full name of the lab's namespace short.
func (l *lab) ns(short string) string { return l.prefix + "-" + short }

func (l *lab) sh(args ...string) {
	l.t.Helper()
	if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
		l.t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
	}
}

// addNS creates a namespace with loopback up; the test deletes it.
func (l *lab) addNS(short string) string {
	l.t.Helper()
	ns := l.ns(short)
	l.sh("ip", "netns", "add", ns)
	l.t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "delete", ns).CombinedOutput(); err != nil {
			l.t.Errorf("deleting namespace %s: %v: %s", ns, err, out)
		}
	})
	l.sh("ip", "-n", ns, "link", "set", "lo", "up")
	return ns
}

func (l *lab) sysctl(ns, key, value string) {
	l.t.Helper()
	l.sh("ip", "netns", "exec", ns, "sysctl", "-qw", key+"="+value)
}

// node creates a node namespace that forwards.
func (l *lab) node(short string) string {
	ns := l.addNS(short)
	l.sysctl(ns, "net.ipv4.ip_forward", "1")
	return ns
}

// pod wires namespace short to node as a routed CNI does: a veth, the
// pod's /32, a default route through a link-local gateway address on the
// node's side.
func (l *lab) pod(node, short, ip string, mtu int) string {
	ns := l.addNS(short)
	veth := "v" + short
	l.sh("ip", "link", "add", veth, "netns", node, "mtu", fmt.Sprint(mtu), "type", "veth", "peer", "name", "eth0", "netns", ns, "mtu", fmt.Sprint(mtu))
	l.sh("ip", "-n", node, "addr", "add", "169.254.1.1/32", "dev", veth)
	l.sh("ip", "-n", node, "link", "set", veth, "up")
	l.sh("ip", "-n", node, "route", "add", ip+"/32", "dev", veth)
	l.sh("ip", "-n", ns, "addr", "add", ip+"/32", "dev", "eth0")
	l.sh("ip", "-n", ns, "link", "set", "eth0", "up")
	l.sh("ip", "-n", ns, "route", "add", "169.254.1.1", "dev", "eth0")
	l.sh("ip", "-n", ns, "route", "add", "default", "via", "169.254.1.1", "dev", "eth0")
	return ns
}

// nft programs the node namespace ns with rules in table offload-lab.
func (l *lab) nft(ns string, build func(c *nftables.Conn, t *nftables.Table)) {
	l.t.Helper()
	h, err := netns.GetFromName(ns)
	if err != nil {
		l.t.Fatal(err)
	}
	defer func() { _ = h.Close() }()
	c := &nftables.Conn{NetNS: int(h)}
	t := c.AddTable(&nftables.Table{Family: nftables.TableFamilyIPv4, Name: "offload-lab"})
	build(c, t)
	if err := c.Flush(); err != nil {
		l.t.Fatalf("programming the node %s: %v", ns, err)
	}
}

func natChain(c *nftables.Conn, t *nftables.Table, hook *nftables.ChainHook, prio *nftables.ChainPriority) *nftables.Chain {
	return c.AddChain(&nftables.Chain{Name: "nat" + fmt.Sprint(*prio), Table: t, Type: nftables.ChainTypeNAT, Hooknum: hook, Priority: prio})
}

// startGateway runs the gateway of cfg inside namespace ns.
func (l *lab) startGateway(name, ns string, cfg *Config) {
	l.t.Helper()
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		l.t.Fatal(err)
	}
	path := filepath.Join(l.dir, name+".json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		l.t.Fatal(err)
	}
	l.run(name, ns, path)
}

func (l *lab) run(name, ns, config string) {
	l.t.Helper()
	log, err := os.OpenFile(filepath.Join(l.dir, name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		l.t.Fatal(err)
	}
	cmd := exec.Command("nsenter", "--net=/run/netns/"+ns, os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+config)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		l.t.Fatal(err)
	}
	p := &gatewayProc{ns: ns, config: config, cmd: cmd, log: log}
	if old := l.gws[name]; old == nil {
		l.t.Cleanup(func() { l.stop(name, syscall.SIGTERM) })
	}
	l.gws[name] = p
}

// stop ends gateway name with sig and waits for it.
func (l *lab) stop(name string, sig syscall.Signal) {
	p := l.gws[name]
	if p == nil || p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
		l.t.Errorf("gateway %s did not stop within 15s of %v", name, sig)
	}
	_ = p.log.Close()
	if l.t.Failed() {
		b, _ := os.ReadFile(p.log.Name())
		l.t.Logf("gateway %s log:\n%s", name, b)
	}
}

// status reads gateway name's /status.
func (l *lab) status(name string) (Status, error) {
	var st Status
	err := framework.InNetNS(l.gws[name].ns, func() error {
		c, err := net.DialTimeout("tcp4", "127.0.0.1:8083", time.Second)
		if err != nil {
			return err
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := io.WriteString(c, "GET /status HTTP/1.0\r\n\r\n"); err != nil {
			return err
		}
		b, err := io.ReadAll(c)
		if err != nil {
			return err
		}
		_, body, ok := strings.Cut(string(b), "\r\n\r\n")
		if !ok {
			return fmt.Errorf("no HTTP body in %q", b)
		}
		return json.Unmarshal([]byte(body), &st)
	})
	return st, err
}

// waitConnected polls until both gateways answer each other's liveness
// probes, and returns how long that took.
func (l *lab) waitConnected(timeout time.Duration, names ...string) time.Duration {
	l.t.Helper()
	took, err := framework.Poll(l.t.Context(), 100*time.Millisecond, timeout, func(context.Context) (bool, string) {
		for _, n := range names {
			st, err := l.status(n)
			if err != nil {
				return false, fmt.Sprintf("%s: %v", n, err)
			}
			if !st.Connected {
				return false, fmt.Sprintf("%s: not connected (%+v)", n, st)
			}
		}
		return true, ""
	})
	if err != nil {
		l.t.Fatalf("the tunnel did not come up: %v", err)
	}
	return took
}

// serve runs, in namespace ns, a server on :8080 that answers
// "<name> <client address it sees>" and one on :8081 that sends 1 MiB.
func (l *lab) serve(ns, name string) {
	l.t.Helper()
	listen := func(port int) net.Listener {
		var ln net.Listener
		if err := framework.InNetNS(ns, func() (err error) {
			ln, err = net.Listen("tcp4", fmt.Sprintf("0.0.0.0:%d", port))
			return err
		}); err != nil {
			l.t.Fatal(err)
		}
		l.t.Cleanup(func() { _ = ln.Close() })
		return ln
	}
	accept := func(ln net.Listener, handle func(net.Conn)) {
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
	accept(listen(8080), func(c net.Conn) {
		ip := c.RemoteAddr().(*net.TCPAddr).IP
		_, _ = fmt.Fprintf(c, "%s %s\n", name, ip)
	})
	accept(listen(8081), func(c net.Conn) { _, _ = c.Write(mebibyte()) })
}

func mebibyte() []byte {
	b := make([]byte, 1<<20)
	for i := range b {
		b[i] = byte(i * 7 / 3)
	}
	return b
}

// call connects from namespace ns to addr, from local port sport when
// non-zero, and returns the whole answer.
func call(ns, addr string, sport int) (string, error) {
	b, err := callRaw(ns, addr, sport)
	return strings.TrimSpace(string(b)), err
}

// callRaw is call without trimming the answer.
func callRaw(ns, addr string, sport int) ([]byte, error) {
	var out []byte
	err := framework.InNetNS(ns, func() error {
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

func key(t *testing.T, dir, name string) (path string, public string) {
	t.Helper()
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		t.Fatal(err)
	}
	path = filepath.Join(dir, name+".key")
	if err := os.WriteFile(path, []byte(k.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, k.PublicKey().String()
}

// sourcePortParity is the ClusterIP-like rule of the lab's consumer node:
// to vip:port, an even source port goes to even, an odd one to odd. It is
// what kube-proxy does to a Service with one local and one remote
// endpoint, made deterministic.
func sourcePortParity(vip netip.Addr, port uint16, even, odd netip.Addr) [][]expr.Any {
	rule := func(parity byte, to netip.Addr) []expr.Any {
		return nftexpr.Rule(
			nftexpr.MatchPrefix(nftexpr.Destination, netip.PrefixFrom(vip, 32)),
			nftexpr.Protocol(unix.IPPROTO_TCP), nftexpr.DestinationPort(port),
			[]expr.Any{
				&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 0, Len: 2},
				&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 2, Mask: []byte{0, 1}, Xor: []byte{0, 0}},
				&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{0, parity}},
			},
			nftexpr.DNAT(to, port))
	}
	return [][]expr.Any{rule(0, even), rule(1, odd)}
}
