// Package gateway is the network gateway of one peering: a WireGuard
// device (the kernel's where the module exists, embedded wireguard-go
// otherwise, configured through wgctrl either way) inside the gateway pod's
// own network namespace, with the nftables rules and policy routes that
// translate between this cluster's views of the peer's pod CIDRs and the
// peer's real addresses, the tenant filter, the MSS clamp and a liveness
// probe over the tunnel. The provider's gateway is the server, the
// consumer's the client. Everything is programmed through netlink; the
// image needs no tools. See docs/networking.md.
package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// Options are the settings of a gateway process.
type Options struct {
	// ConfigFile is the JSON Config, re-read when it changes. Load, when
	// set, replaces it.
	ConfigFile string
	// Load returns the configuration as it is now; it is called every
	// ReloadInterval and applied when it changed. Until it first succeeds
	// the gateway waits (the peer's key and endpoint may not be known yet).
	Load func(ctx context.Context) (*Config, error)
	// Report, when set, receives the status every ReloadInterval.
	Report func(ctx context.Context, st Status) error
	// HealthProbeBindAddress serves /healthz, /readyz and /status.
	HealthProbeBindAddress string
	// ReloadInterval is how often the configuration file is checked.
	ReloadInterval time.Duration
}

// Status is what a gateway reports about its tunnel, at /status.
type Status struct {
	// Implementation is the device that runs: kernel or userspace.
	Implementation Implementation `json:"implementation"`
	Interface      string         `json:"interface"`
	Role           Role           `json:"role"`
	PublicKey      string         `json:"publicKey"`
	ListenPort     int            `json:"listenPort"`
	// Endpoint is the peer's address as the tunnel last saw it.
	Endpoint string `json:"endpoint,omitempty"`
	MTU      int    `json:"mtu"`
	// PathMTU is what this side's path allows: the egress MTU minus 80.
	PathMTU int `json:"pathMTU,omitempty"`
	// LastHandshake is the last completed WireGuard handshake.
	LastHandshake time.Time `json:"lastHandshake,omitzero"`
	RxBytes       int64     `json:"rxBytes"`
	TxBytes       int64     `json:"txBytes"`
	// RxPackets and TxPackets are the tunnel device's own packet counts:
	// what came from the peer, decrypted, and what this side sent into the
	// tunnel. wireguard-go's TUN device counts coalesced TCP segments as
	// one packet.
	RxPackets int64 `json:"rxPackets"`
	TxPackets int64 `json:"txPackets"`
	// Connected says the peer answered the liveness probe recently.
	Connected bool      `json:"connected"`
	LastPong  time.Time `json:"lastPong,omitzero"`
	// RTT is the last probe's round trip.
	RTT time.Duration `json:"rttNanoseconds"`
	// Filtered counts the packets the tenant filter dropped.
	Filtered uint64 `json:"filteredPackets"`
	// Mappings are this side's views of the peer's pod CIDRs.
	Mappings []Mapping `json:"mappings"`
	// Error is the last failure to apply the configuration.
	Error string `json:"error,omitempty"`
}

// Gateway runs one tunnel.
type Gateway struct {
	opts Options
	log  logr.Logger

	mu      sync.Mutex
	cfg     *Config
	raw     []byte
	dev     *wgDevice
	mtu     int
	pathMTU int
	key     wgtypes.Key
	ready   bool
	lastErr error
	live    liveness
	beat    time.Time
	// lastReset is when the client last dropped the peer's session, or
	// when the device was configured.
	lastReset time.Time
}

// resetAfter is how long the client waits for an answer to its probes, or
// after its last reset, before it resets the peer's session.
const resetAfter = 2*probeInterval + probeInterval/2

// New returns a gateway for opts.
func New(opts Options, log logr.Logger) *Gateway {
	if opts.ReloadInterval <= 0 {
		opts.ReloadInterval = 2 * time.Second
	}
	if opts.Load == nil {
		path := opts.ConfigFile
		opts.Load = func(context.Context) (*Config, error) { return LoadConfig(path) }
	}
	return &Gateway{opts: opts, log: log}
}

// load returns the configuration and its canonical form, to compare.
func (g *Gateway) load(ctx context.Context) (*Config, []byte, error) {
	cfg, err := g.opts.Load(ctx)
	if err != nil {
		return nil, nil, err
	}
	raw, err := json.Marshal(cfg)
	return cfg, raw, err
}

// waitConfig polls until the configuration is complete and valid.
func (g *Gateway) waitConfig(ctx context.Context) (*Config, []byte, error) {
	last := ""
	for {
		// Waiting is the loop's work until the configuration is there.
		g.mu.Lock()
		g.beat = time.Now()
		g.mu.Unlock()
		cfg, raw, err := g.load(ctx)
		if err == nil {
			return cfg, raw, nil
		}
		if err.Error() != last {
			g.log.Info("Waiting for the tunnel's configuration", "reason", err.Error())
			last = err.Error()
		}
		g.mu.Lock()
		g.lastErr = err
		g.mu.Unlock()
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(g.opts.ReloadInterval):
		}
	}
}

// Run sets the tunnel up and keeps it as the configuration says until ctx
// ends, then removes what it added.
func (g *Gateway) Run(ctx context.Context) error {
	g.mu.Lock()
	g.beat = time.Now()
	g.mu.Unlock()
	srv, err := g.serveHTTP()
	if err != nil {
		return err
	}
	defer func() { _ = srv.Close() }()
	if err := prepareForwarding(); err != nil {
		return err
	}
	cfg, raw, err := g.waitConfig(ctx)
	if err != nil {
		return nil // stopped while waiting
	}
	if err := g.start(cfg, raw); err != nil {
		g.teardown()
		return err
	}
	defer g.teardown()

	local, peer := cfg.tunnelAddrs()
	probes, stop := context.WithCancel(ctx)
	defer stop()
	go serveEcho(probes, local)
	go g.live.probe(probes, local, peer, g.peerReachable)

	t := time.NewTicker(g.opts.ReloadInterval)
	defer t.Stop()
	wasConnected := false
	for {
		g.mu.Lock()
		g.beat = time.Now()
		g.mu.Unlock()
		if c := g.live.connected(time.Now()); c != wasConnected {
			g.log.Info("Tunnel "+map[bool]string{true: "connected", false: "disconnected"}[c], "peer", peer)
			wasConnected = c
		}
		g.rehandshake(time.Now())
		g.report(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if err := g.reload(ctx); err != nil {
			g.log.Error(err, "Applying the changed configuration")
		}
	}
}

// reportTimeout bounds one Report: a hung API server must not stall the
// loop, whose beat /healthz watches; the next round reports again.
const reportTimeout = 10 * time.Second

// report hands the status to Report.
func (g *Gateway) report(ctx context.Context) {
	if g.opts.Report == nil {
		return
	}
	rctx, cancel := context.WithTimeout(ctx, reportTimeout)
	defer cancel()
	if err := g.opts.Report(rctx, g.Status()); err != nil && ctx.Err() == nil {
		g.log.Error(err, "Reporting the tunnel's status")
	}
}

// start creates the device and applies cfg.
func (g *Gateway) start(cfg *Config, raw []byte) error {
	key, err := readKey(cfg.PrivateKeyFile)
	if err != nil {
		return err
	}
	path, err := pathMTU(cfg.PeerEndpoint)
	mtu := cfg.MTU
	if mtu == 0 {
		if err != nil {
			return fmt.Errorf("deriving the tunnel MTU (set mtu in the configuration): %w", err)
		}
		mtu = path
	}
	// Whatever a crashed run left behind goes first.
	_ = deleteRules()
	_ = teardownRouting()
	dev, err := newDevice(cfg.Interface, cfg.Implementation, mtu, g.log)
	if err != nil {
		return err
	}
	g.mu.Lock()
	g.dev, g.key, g.mtu, g.pathMTU, g.lastReset = dev, key, mtu, path, time.Now()
	g.mu.Unlock()
	g.log.Info("WireGuard device created", "interface", cfg.Interface, "implementation", dev.implementation, "mtu", mtu)
	return g.apply(cfg, raw)
}

// apply configures the existing device, routes and rules for cfg.
func (g *Gateway) apply(cfg *Config, raw []byte) error {
	err := g.program(cfg)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lastErr = err
	if err == nil {
		g.cfg, g.raw, g.ready = cfg, raw, true
	}
	return err
}

func (g *Gateway) program(cfg *Config) error {
	podIP := cfg.PodIP
	if !podIP.IsValid() {
		var err error
		if podIP, err = defaultRouteAddr(); err != nil {
			return fmt.Errorf("finding the gateway pod's address: %w", err)
		}
	}
	local, _ := cfg.tunnelAddrs()
	mtu := cfg.MTU
	if mtu == 0 {
		mtu = g.mtu
	}
	if err := g.dev.configure(cfg, g.key); err != nil {
		return err
	}
	if err := setupLink(cfg.Interface, local, mtu); err != nil {
		return err
	}
	if err := setupRouting(cfg.Interface); err != nil {
		return err
	}
	if err := applyRules(cfg, podIP); err != nil {
		return err
	}
	g.log.Info("Tunnel configured", "role", cfg.Role, "endpoint", cfg.PeerEndpoint, "mtu", mtu, "mappings", cfg.Peer, "podIP", podIP)
	return nil
}

// reload applies the configuration when it changed. A change of device
// (name or implementation) needs a new process: it says so.
func (g *Gateway) reload(ctx context.Context) error {
	cfg, raw, err := g.load(ctx)
	if err != nil {
		return err
	}
	g.mu.Lock()
	same := bytes.Equal(raw, g.raw)
	old := g.cfg
	g.mu.Unlock()
	if same {
		return nil
	}
	if cfg.Interface != old.Interface || cfg.Implementation != old.Implementation || cfg.Role != old.Role {
		return errors.New("the interface, implementation or role changed: restart the gateway to apply it")
	}
	if cfg.PrivateKeyFile != old.PrivateKeyFile {
		if g.key, err = readKey(cfg.PrivateKeyFile); err != nil {
			return err
		}
	}
	return g.apply(cfg, raw)
}

// peerReachable tells whether the device knows where its peer is: always
// for the client, once the client has connected for the server.
func (g *Gateway) peerReachable() bool {
	g.mu.Lock()
	cfg, dev := g.cfg, g.dev
	g.mu.Unlock()
	if cfg == nil || dev == nil {
		return false
	}
	if cfg.Role == RoleClient {
		return true
	}
	_, p, err := dev.peerStats()
	return err == nil && p != nil && p.Endpoint != nil
}

// rehandshake lets the client find a restarted server at once. A server
// that lost its session silently drops the client's packets, and WireGuard
// itself starts a new handshake only after 15 s without an answer. When
// the liveness probe goes unanswered for resetAfter, the client drops the
// peer's session (removing and adding the peer again), so its next packet,
// the next probe, starts a handshake.
func (g *Gateway) rehandshake(now time.Time) {
	g.mu.Lock()
	cfg, last := g.cfg, g.lastReset
	g.mu.Unlock()
	if cfg == nil || cfg.Role != RoleClient {
		return
	}
	pong, _ := g.live.snapshot()
	// A new process (last is its start) first gives its own handshake time.
	if now.Sub(pong) < resetAfter || now.Sub(last) < resetAfter {
		return
	}
	g.mu.Lock()
	g.lastReset = now
	g.mu.Unlock()
	if err := g.dev.resetPeer(cfg, g.key); err != nil {
		g.log.Error(err, "Resetting the peer's session")
		return
	}
	g.log.V(1).Info("The peer stopped answering; starting a new handshake")
}

// teardown removes the rules, routes and device.
func (g *Gateway) teardown() {
	if err := deleteRules(); err != nil {
		g.log.Error(err, "Removing the rules")
	}
	if err := teardownRouting(); err != nil {
		g.log.Error(err, "Removing the routing rules")
	}
	if g.dev != nil {
		if err := g.dev.close(); err != nil {
			g.log.Error(err, "Removing the WireGuard device")
		}
	}
}

// Status reports the tunnel now.
func (g *Gateway) Status() Status {
	g.mu.Lock()
	cfg, dev, mtu, lastErr := g.cfg, g.dev, g.mtu, g.lastErr
	st := Status{MTU: mtu, PathMTU: g.pathMTU}
	g.mu.Unlock()
	if lastErr != nil {
		st.Error = lastErr.Error()
	}
	if cfg != nil {
		st.Interface, st.Role, st.Mappings = cfg.Interface, cfg.Role, cfg.Peer
		if cfg.MTU != 0 {
			st.MTU = cfg.MTU
		}
	}
	if dev == nil {
		return st
	}
	st.Implementation = dev.implementation
	// The liveness is read before the device's counters: an answer of the
	// peer follows a handshake and carries bytes, so a status that says
	// connected also shows that handshake and those bytes. Read after, the
	// first answer could land between the two reads, and the status say
	// connected with no handshake yet.
	lastPong, rtt := g.live.snapshot()
	connected := g.live.connected(time.Now())
	d, p, err := dev.peerStats()
	if err != nil {
		st.Error = err.Error()
		return st
	}
	st.PublicKey, st.ListenPort = d.PublicKey.String(), d.ListenPort
	if p != nil {
		if p.Endpoint != nil {
			st.Endpoint = p.Endpoint.String()
		}
		st.LastHandshake, st.RxBytes, st.TxBytes = p.LastHandshakeTime, p.ReceiveBytes, p.TransmitBytes
	}
	st.LastPong, st.RTT, st.Connected = lastPong, rtt, connected
	st.RxPackets, st.TxPackets, _ = linkPackets(dev.name)
	st.Filtered, _ = filteredPackets()
	return st
}

// linkPackets reads the packets device name received and sent, from its
// interface statistics: the kernel's WireGuard device and wireguard-go's
// TUN device count alike, received being what came from the peer.
func linkPackets(name string) (rx, tx int64, err error) {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return 0, 0, err
	}
	s := l.Attrs().Statistics
	if s == nil {
		return 0, 0, fmt.Errorf("device %s has no statistics", name)
	}
	return int64(s.RxPackets), int64(s.TxPackets), nil
}

// serveHTTP serves /healthz (the loop runs), /readyz (the tunnel is
// configured: the server must be ready before any client can connect, so
// readiness never waits for the peer) and /status.
func (g *Gateway) serveHTTP() (*http.Server, error) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		g.mu.Lock()
		stale := time.Since(g.beat) > 10*g.opts.ReloadInterval+time.Minute
		g.mu.Unlock()
		if stale {
			http.Error(w, "the gateway loop is stuck", http.StatusInternalServerError)
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		g.mu.Lock()
		ready, err := g.ready, g.lastErr
		g.mu.Unlock()
		if !ready || err != nil {
			http.Error(w, fmt.Sprintf("not configured: %v", err), http.StatusServiceUnavailable)
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/status", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(g.Status())
	})
	l, err := net.Listen("tcp", g.opts.HealthProbeBindAddress)
	if err != nil {
		return nil, fmt.Errorf("listening on %s: %w", g.opts.HealthProbeBindAddress, err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return srv, nil
}

// readKey reads a base64 WireGuard private key.
func readKey(path string) (wgtypes.Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return wgtypes.Key{}, fmt.Errorf("reading the private key: %w", err)
	}
	k, err := wgtypes.ParseKey(strings.TrimSpace(string(b)))
	if err != nil {
		return wgtypes.Key{}, fmt.Errorf("the private key in %s: %w", path, err)
	}
	return k, nil
}
