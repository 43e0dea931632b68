package gateway

import (
	"context"
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

	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
	"k8s.io/klog/v2/textlogger"

	"github.com/kubectl-offload/kubectl-offload/internal/nftexpr"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
	"github.com/kubectl-offload/kubectl-offload/test/framework/netlab"
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
	os.Exit(envtest.RunWithAPIServer(m))
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
	*netlab.NetLab
	t   *testing.T
	dir string
	gws map[string]*gatewayProc
}

type gatewayProc struct {
	ns, config string
	cmd        *exec.Cmd
	log        *os.File
}

func newLab(t *testing.T) *lab {
	t.Helper()
	return &lab{NetLab: netlab.NewNetLab(t, "gwl"), t: t, dir: t.TempDir(), gws: map[string]*gatewayProc{}}
}

// startGateway runs the gateway of cfg inside namespace ns.
func (l *lab) startGateway(name, ns string, cfg *Config) {
	l.t.Helper()
	l.run(name, ns, l.writeConfig(name, cfg))
}

// writeConfig writes the configuration file of gateway name, which a
// running gateway reloads, and returns its path.
func (l *lab) writeConfig(name string, cfg *Config) string {
	l.t.Helper()
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		l.t.Fatal(err)
	}
	path := filepath.Join(l.dir, name+".json")
	if err := os.WriteFile(path, b, 0o600); err != nil {
		l.t.Fatal(err)
	}
	return path
}

func (l *lab) run(name, ns, config string) {
	l.t.Helper()
	log, err := os.OpenFile(filepath.Join(l.dir, name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		l.t.Fatal(err)
	}
	hostileForwardingSettings(l.t, ns)
	// As in a container: /proc/sys read-only, in a mount namespace of its own.
	cmd := exec.Command("nsenter", "--net=/run/netns/"+ns, "unshare", "--mount", "--propagation", "private",
		"sh", "-c", `mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys && exec "$0" -test.run='^$'`, os.Args[0])
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

// hostileForwardingSettings turns forwarding off and reverse-path filtering
// strict, and local sources off, for every device of ns and the defaults:
// the gateway, with /proc/sys read-only, must set its devices' own values.
func hostileForwardingSettings(t *testing.T, ns string) {
	t.Helper()
	script := `set -e
sysctl -qw net.ipv4.conf.all.forwarding=0
for d in /proc/sys/net/ipv4/conf/*; do
  [ "${d##*/}" = all ] && continue
  echo 1 > "$d/rp_filter"; echo 0 > "$d/accept_local"
done`
	if out, err := exec.Command("ip", "netns", "exec", ns, "sh", "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("setting hostile forwarding settings in %s: %v: %s", ns, err, out)
	}
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
	err := netlab.InNetNS(l.gws[name].ns, func() error {
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
