package bench

import (
	"context"
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
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/tun"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/kubectl-offload/kubectl-offload/internal/nftexpr"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/images"
	"github.com/kubectl-offload/kubectl-offload/test/framework/netlab"
	"github.com/kubectl-offload/kubectl-offload/test/framework/tools"
)

// P6, the network fabric's speed. In one run on this host, each over TCP
// between network namespaces:
//  1. bare wireguard-go: two devices, no NAT, no rules (the ceiling);
//  2. the fabric: pod -> node -> gateway (offload-agent gateway, prefix NAT,
//     marks, tenant filter) -> WireGuard -> gateway -> node -> pod, both
//     clusters with the same pod CIDR;
//  3. the underlay: node to node, no tunnel.
//
// It prints throughput, the ratio (2)/(1) (goal >= 0.95), the latency of
// requests over new connections (p50/p99, fabric against underlay), the
// gateways' CPU-seconds per GB and their peak RSS. Needs root.
//
//	make bench-network

const (
	bulkBytes  = 256 << 20
	rounds     = 3
	latencyReq = 300
	wgChildEnv = "OFFLOAD_BENCH_WIREGUARD"
)

func TestMain(m *testing.M) {
	if cfg := os.Getenv(wgChildEnv); cfg != "" {
		os.Exit(bareWireGuard(cfg))
	}
	code := m.Run()
	_ = tools.RemoveBinaries()
	os.Exit(code)
}

// bareConfig is one bare wireguard-go device of path (1).
type bareConfig struct {
	Name, Addr, PrivateKey, PeerKey, PeerEndpoint string
	ListenPort                                    int
}

// bareWireGuard runs one device until SIGTERM: what the gateway runs,
// without its rules.
func bareWireGuard(raw string) int {
	var c bareConfig
	if err := json.Unmarshal([]byte(raw), &c); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	t, err := tun.CreateTUN(c.Name, 1420)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	dev := device.NewDevice(t, conn.NewDefaultBind(), device.NewLogger(device.LogLevelError, ""))
	defer dev.Close()
	hexKey := func(s string) string { k, _ := wgtypes.ParseKey(s); return hex.EncodeToString(k[:]) }
	uapi := fmt.Sprintf("private_key=%s\nlisten_port=%d\npublic_key=%s\nallowed_ip=10.200.0.0/24\npersistent_keepalive_interval=25\n",
		hexKey(c.PrivateKey), c.ListenPort, hexKey(c.PeerKey))
	if c.PeerEndpoint != "" {
		uapi += "endpoint=" + c.PeerEndpoint + "\n"
	}
	if err := dev.IpcSet(uapi); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	l, err := netlink.LinkByName(c.Name)
	if err == nil {
		a, _ := netlink.ParseAddr(c.Addr)
		err = netlink.AddrAdd(l, a)
	}
	if err == nil {
		err = netlink.LinkSetUp(l)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	<-ctx.Done()
	return 0
}

func BenchmarkNetwork(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("network namespaces need root")
	}
	for b.Loop() {
		runNetworkBench(b)
	}
}

type netBench struct {
	b   *testing.B
	lab *netlab.NetLab
	dir string
	// procs are the processes the bench started, by name.
	procs map[string]*exec.Cmd
}

func runNetworkBench(b *testing.B) {
	nb := &netBench{b: b, dir: b.TempDir(), procs: map[string]*exec.Cmd{}}
	nb.lab = netlab.NewNetLab(b, "p6")
	load, _ := os.ReadFile("/proc/loadavg")

	agent, err := images.BuildGoBinary(context.Background(), "github.com/kubectl-offload/kubectl-offload/cmd/offload-agent", filepath.Join(nb.dir, "bin"), "")
	if err != nil {
		b.Fatal(err)
	}
	l := nb.lab
	cn, pn := l.Node("cn"), l.Node("pn")
	l.Sh("ip", "link", "add", "ul", "netns", cn, "type", "veth", "peer", "name", "ul", "netns", pn)
	for ns, addr := range map[string]string{cn: "10.98.0.1/30", pn: "10.98.0.2/30"} {
		l.Sh("ip", "-n", ns, "addr", "add", addr, "dev", "ul")
		l.Sh("ip", "-n", ns, "link", "set", "ul", "up")
	}
	cpod, ppod := l.Pod(cn, "cpod", "10.244.1.5", 1500), l.Pod(pn, "ppod", "10.244.1.5", 1500)
	l.Pod(cn, "cgw", "10.244.1.9", 1500)
	l.Pod(pn, "pgw", "10.244.2.9", 1500)
	cgw, pgw := l.NS("cgw"), l.NS("pgw")
	l.Sh("ip", "-n", cn, "route", "add", "10.70.0.0/16", "via", "10.244.1.9")
	l.Sh("ip", "-n", pn, "route", "add", "10.71.0.0/16", "via", "10.244.2.9")
	// The consumer gateway dials the provider's straight over the underlay
	// (the provider node forwards the port to its gateway pod).
	l.NFT(pn, func(c *nftables.Conn, tb *nftables.Table) {
		pre := netlab.NATChain(c, tb, nftables.ChainHookPrerouting, nftables.ChainPriorityNATDest)
		c.AddRule(&nftables.Rule{Table: tb, Chain: pre, Exprs: nftexpr.Rule(nftexpr.Interface(true, "ul", true),
			nftexpr.Protocol(unix.IPPROTO_UDP), nftexpr.DestinationPort(31820), nftexpr.DNAT(netip.MustParseAddr("10.244.2.9"), 51820))})
	})
	for _, ns := range []string{cn, pn} {
		l.NFT(ns, func(c *nftables.Conn, tb *nftables.Table) {
			post := netlab.NATChain(c, tb, nftables.ChainHookPostrouting, nftables.ChainPriorityNATSource)
			c.AddRule(&nftables.Rule{Table: tb, Chain: post, Exprs: nftexpr.Rule(nftexpr.Interface(false, "ul", true),
				nftexpr.MatchPrefix(nftexpr.Source, netip.MustParsePrefix("10.244.0.0/16")), nftexpr.Masquerade())})
		})
	}

	// (2) the fabric's gateways.
	ck, pk := newKey(b), newKey(b)
	nb.gateway(agent, "consumer", cgw, map[string]any{
		"role": "client", "interface": l.Prefix + "c", "implementation": "userspace", "privateKeyFile": nb.keyFile("c", ck),
		"peerPublicKey": pk.PublicKey().String(), "peerEndpoint": "10.98.0.2:31820",
		"localPodCIDRs": []string{"10.244.0.0/16"}, "peer": []map[string]string{{"real": "10.244.0.0/16", "view": "10.70.0.0/16"}},
	})
	nb.gateway(agent, "provider", pgw, map[string]any{
		"role": "server", "interface": l.Prefix + "p", "implementation": "userspace", "privateKeyFile": nb.keyFile("p", pk), "listenPort": 51820,
		"peerPublicKey": ck.PublicKey().String(),
		"localPodCIDRs": []string{"10.244.0.0/16"}, "peer": []map[string]string{{"real": "10.244.0.0/16", "view": "10.71.0.0/16"}},
	})
	// (1) bare wireguard-go between the two nodes.
	ak, bk := newKey(b), newKey(b)
	nb.bare(cn, bareConfig{Name: l.Prefix + "a", Addr: "10.200.0.1/24", PrivateKey: ak.String(), PeerKey: bk.PublicKey().String(), PeerEndpoint: "10.98.0.2:41820"})
	nb.bare(pn, bareConfig{Name: l.Prefix + "b", Addr: "10.200.0.2/24", PrivateKey: bk.String(), PeerKey: ak.PublicKey().String(), ListenPort: 41820})

	for _, ns := range []string{pn, ppod} {
		serveBulk(l, ns)
		serveEcho(l, ns)
	}
	paths := []struct{ name, from, to string }{
		{"bare", cn, "10.200.0.2"}, {"fabric", cpod, "10.70.1.5"}, {"underlay", cn, "10.98.0.2"},
	}
	for _, p := range paths {
		waitReachable(b, p.from, p.to)
	}

	// Throughput: rounds interleaved, so drift on the host hits every path.
	gbps := map[string][]float64{}
	cpuBefore := nb.cpu("consumer", "provider")
	var fabricBytes float64
	for range rounds {
		for _, p := range paths {
			g, n := bulkGbps(b, p.from, p.to)
			gbps[p.name] = append(gbps[p.name], g)
			if p.name == "fabric" {
				fabricBytes += float64(n)
			}
		}
	}
	cpu := nb.cpu("consumer", "provider") - cpuBefore
	lat := map[string][]time.Duration{}
	for _, p := range paths[1:] {
		lat[p.name] = latencies(b, p.from, p.to)
	}

	med := func(xs []float64) float64 { s := slices.Clone(xs); slices.Sort(s); return s[len(s)/2] }
	pct := func(ds []time.Duration, q float64) time.Duration {
		s := slices.Clone(ds)
		slices.Sort(s)
		return s[int(q*float64(len(s)-1))]
	}
	fmt.Printf("\nP6 network fabric (%s, %d cores, load before: %s)\n", runtime.GOARCH, runtime.NumCPU(), strings.TrimSpace(string(load)))
	fmt.Println("  competing for the cores during each measurement: the bench's own client and server, and on")
	fmt.Println("  paths 1 and 2 the two WireGuard processes of that path; nothing else was started by the bench")
	for _, p := range paths {
		fmt.Printf("  %-9s throughput median of %d x %d MiB: %6.2f Gbit/s  (rounds %s)\n", p.name, rounds, bulkBytes>>20, med(gbps[p.name]), fmtFloats(gbps[p.name]))
	}
	fmt.Printf("  ratio fabric / bare wireguard-go: %.2f (goal >= 0.95)\n", med(gbps["fabric"])/med(gbps["bare"]))
	for _, name := range []string{"fabric", "underlay"} {
		fmt.Printf("  %-9s request over a new connection (%d): p50 %v, p99 %v\n", name, latencyReq, pct(lat[name], 0.5).Round(time.Microsecond), pct(lat[name], 0.99).Round(time.Microsecond))
	}
	fmt.Printf("  fabric extra latency per new-connection request: p50 %v\n", (pct(lat["fabric"], 0.5) - pct(lat["underlay"], 0.5)).Round(time.Microsecond))
	fmt.Printf("  gateways' CPU (both, user+system) per GB through the fabric: %.2f s/GB\n", cpu/(fabricBytes/1e9))
	for _, name := range []string{"consumer", "provider"} {
		fmt.Printf("  %s gateway peak RSS: %d MiB\n", name, nb.rssKiB(name)>>10)
	}
	b.ReportMetric(med(gbps["fabric"]), "Gbit/s-fabric")
	b.ReportMetric(med(gbps["fabric"])/med(gbps["bare"]), "ratio-fabric/bare")
}

func newKey(b *testing.B) wgtypes.Key {
	k, err := wgtypes.GeneratePrivateKey()
	if err != nil {
		b.Fatal(err)
	}
	return k
}

func (nb *netBench) keyFile(name string, k wgtypes.Key) string {
	p := filepath.Join(nb.dir, name+".key")
	if err := os.WriteFile(p, []byte(k.String()), 0o600); err != nil {
		nb.b.Fatal(err)
	}
	return p
}

// start runs a process inside namespace ns until the benchmark ends.
func (nb *netBench) start(name, ns string, env []string, args ...string) {
	cmd := exec.Command("nsenter", append([]string{"--net=/run/netns/" + ns}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	log, err := os.Create(filepath.Join(nb.dir, name+".log"))
	if err != nil {
		nb.b.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		nb.b.Fatal(err)
	}
	nb.procs[name] = cmd
	nb.b.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		_ = log.Close()
	})
}

func (nb *netBench) gateway(agent, name, ns string, cfg map[string]any) {
	raw, _ := json.Marshal(cfg)
	path := filepath.Join(nb.dir, name+".json")
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		nb.b.Fatal(err)
	}
	nb.start(name, ns, nil, agent, "gateway", "--config", path, "--health-probe-bind-address", "127.0.0.1:8083")
}

func (nb *netBench) bare(ns string, c bareConfig) {
	raw, _ := json.Marshal(c)
	nb.start(c.Name, ns, []string{wgChildEnv + "=" + string(raw)}, os.Args[0], "-test.run=^$", "-test.bench=^$")
}

// cpu is the user+system CPU seconds of the named processes so far.
func (nb *netBench) cpu(names ...string) float64 {
	var total float64
	for _, n := range names {
		// The process is nsenter's child: nsenter execs it, same PID.
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", nb.procs[n].Process.Pid))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		total += (ut + st) / 100 // clock ticks; USER_HZ is 100 on Linux
	}
	return total
}

// rssKiB is the peak RSS of process name.
func (nb *netBench) rssKiB(name string) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", nb.procs[name].Process.Pid))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	return 0
}

// serveBulk sends bulkBytes to every connection on :9000 of ns.
func serveBulk(l *netlab.NetLab, ns string) {
	buf := make([]byte, 256<<10)
	l.Listen(ns, 9000, func(c net.Conn) {
		for sent := 0; sent < bulkBytes; sent += len(buf) {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	})
}

// serveEcho answers one byte on :9001 of ns.
func serveEcho(l *netlab.NetLab, ns string) {
	l.Listen(ns, 9001, func(c net.Conn) {
		var one [1]byte
		if _, err := io.ReadFull(c, one[:]); err == nil {
			_, _ = c.Write(one[:])
		}
	})
}

// dial connects from namespace ns.
func dial(ns, addr string) (net.Conn, error) {
	var c net.Conn
	err := netlab.InNetNS(ns, func() (err error) {
		c, err = net.DialTimeout("tcp4", addr, 3*time.Second)
		return err
	})
	return c, err
}

func waitReachable(b *testing.B, from, to string) {
	_, err := framework.Poll(context.Background(), 100*time.Millisecond, 30*time.Second, func(context.Context) (bool, string) {
		c, err := dial(from, to+":9001")
		if err != nil {
			return false, err.Error()
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(time.Second))
		_, err = c.Write([]byte{1})
		if err == nil {
			_, err = io.ReadFull(c, make([]byte, 1))
		}
		return err == nil, fmt.Sprint(err)
	})
	if err != nil {
		b.Fatalf("%s cannot reach %s: %v", from, to, err)
	}
}

// bulkGbps reads bulkBytes from to:9000 and returns the rate.
func bulkGbps(b *testing.B, from, to string) (float64, int64) {
	start := time.Now()
	c, err := dial(from, to+":9000")
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	n, err := io.Copy(io.Discard, c)
	if err != nil || n != bulkBytes {
		b.Fatalf("bulk %s -> %s: %d bytes, %v", from, to, n, err)
	}
	return float64(n*8) / time.Since(start).Seconds() / 1e9, n
}

// latencies times latencyReq one-byte requests, each on a new connection.
func latencies(b *testing.B, from, to string) []time.Duration {
	out := make([]time.Duration, 0, latencyReq)
	for range latencyReq {
		start := time.Now()
		c, err := dial(from, to+":9001")
		if err != nil {
			b.Fatal(err)
		}
		_, err = c.Write([]byte{1})
		if err == nil {
			_, err = io.ReadFull(c, make([]byte, 1))
		}
		_ = c.Close()
		if err != nil {
			b.Fatal(err)
		}
		out = append(out, time.Since(start))
	}
	return out
}

func fmtFloats(xs []float64) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = strconv.FormatFloat(x, 'f', 2, 64)
	}
	return strings.Join(s, ", ")
}
