package gateway

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"golang.zx2c4.com/wireguard/conn"
	"golang.zx2c4.com/wireguard/device"
	"golang.zx2c4.com/wireguard/ipc"
	"golang.zx2c4.com/wireguard/tun"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
)

// wgDevice is a WireGuard network device, kernel or userspace. Either way
// it is configured and read through wgctrl.
type wgDevice struct {
	name           string
	implementation Implementation
	// userspace only: the wireguard-go device and its UAPI listener.
	dev  *device.Device
	uapi net.Listener

	// mu orders removing a peer with reading the counters: rx and tx are
	// what the peers removed so far had counted. WireGuard counts per
	// peer, and a peer removed and added again (a dropped session, another
	// peer key) starts from zero; the tunnel's counters must only grow.
	mu     sync.Mutex
	rx, tx int64
}

// newDevice creates the device name with mtu. auto tries the kernel first
// and says why it fell back.
func newDevice(name string, impl Implementation, mtu int, log logr.Logger) (*wgDevice, error) {
	// A device left by a crashed run of this gateway is replaced.
	if l, err := netlink.LinkByName(name); err == nil {
		if err := netlink.LinkDel(l); err != nil {
			return nil, fmt.Errorf("deleting the stale device %s: %w", name, err)
		}
	}
	switch impl {
	case ImplementationKernel:
		return newKernelDevice(name, mtu)
	case ImplementationUserspace:
		return newUserspaceDevice(name, mtu, log)
	}
	d, err := newKernelDevice(name, mtu)
	if err == nil {
		return d, nil
	}
	log.Info("The kernel has no WireGuard device; using embedded wireguard-go", "reason", err.Error())
	return newUserspaceDevice(name, mtu, log)
}

func newKernelDevice(name string, mtu int) (*wgDevice, error) {
	link := &netlink.Wireguard{LinkAttrs: netlink.LinkAttrs{Name: name, MTU: mtu}}
	if err := netlink.LinkAdd(link); err != nil {
		if errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOTSUP) || errors.Is(err, unix.EINVAL) {
			return nil, fmt.Errorf("creating kernel WireGuard device %s: %w (is the wireguard module loaded? use --implementation=userspace otherwise)", name, err)
		}
		return nil, fmt.Errorf("creating kernel WireGuard device %s: %w", name, err)
	}
	return &wgDevice{name: name, implementation: ImplementationKernel}, nil
}

func newUserspaceDevice(name string, mtu int, log logr.Logger) (*wgDevice, error) {
	if err := ensureTUNNode(); err != nil {
		return nil, err
	}
	t, err := tun.CreateTUN(name, mtu)
	if err != nil {
		return nil, fmt.Errorf("creating TUN device %s for wireguard-go: %w", name, err)
	}
	logger := &device.Logger{
		Verbosef: func(format string, args ...any) {
			log.V(2).Info(fmt.Sprintf(format, args...), "component", "wireguard-go")
		},
		Errorf: func(format string, args ...any) {
			log.Error(nil, fmt.Sprintf(format, args...), "component", "wireguard-go")
		},
	}
	dev := device.NewDevice(t, conn.NewDefaultBind(), logger)
	f, err := ipc.UAPIOpen(name)
	if err != nil {
		dev.Close()
		return nil, fmt.Errorf("opening the UAPI socket of %s (is /var/run/wireguard writable?): %w", name, err)
	}
	l, err := ipc.UAPIListen(name, f)
	if err != nil {
		_ = f.Close()
		dev.Close()
		return nil, fmt.Errorf("listening on the UAPI socket of %s: %w", name, err)
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go dev.IpcHandle(c)
		}
	}()
	if err := dev.Up(); err != nil {
		_ = l.Close()
		dev.Close()
		return nil, fmt.Errorf("bringing up wireguard-go on %s: %w", name, err)
	}
	return &wgDevice{name: name, implementation: ImplementationUserspace, dev: dev, uapi: l}, nil
}

// ensureTUNNode creates /dev/net/tun where the container runtime did not
// (containers get the device cgroup rule for it, not always the node).
func ensureTUNNode() error {
	const path = "/dev/net/tun"
	if _, err := os.Stat(path); err == nil {
		return nil
	}
	if err := os.MkdirAll("/dev/net", 0o755); err != nil {
		return fmt.Errorf("creating /dev/net: %w", err)
	}
	if err := unix.Mknod(path, unix.S_IFCHR|0o600, int(unix.Mkdev(10, 200))); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("creating %s (the gateway needs the TUN device or the kernel WireGuard module): %w", path, err)
	}
	return nil
}

// configure applies the WireGuard part of cfg: keys, port and the one peer.
// The peer is updated in place, which keeps its session and counters across
// a reload; any other peer (the key changed) is removed.
func (d *wgDevice) configure(cfg *Config, key wgtypes.Key) error {
	return d.apply(cfg, key, false)
}

// resetPeer removes the peer, dropping its session, and configures it
// again.
func (d *wgDevice) resetPeer(cfg *Config, key wgtypes.Key) error {
	return d.apply(cfg, key, true)
}

// apply is configure, and with reset resetPeer. d.mu is held throughout, so
// the counters are never read between a peer's removal and its return.
func (d *wgDevice) apply(cfg *Config, key wgtypes.Key, reset bool) error {
	peer, err := peerConfig(cfg)
	if err != nil {
		return err
	}
	port := cfg.ListenPort
	c, err := wgctrl.New()
	if err != nil {
		return fmt.Errorf("opening wgctrl: %w", err)
	}
	defer func() { _ = c.Close() }()
	d.mu.Lock()
	defer d.mu.Unlock()
	dev, err := c.Device(d.name)
	if err != nil {
		return fmt.Errorf("reading WireGuard device %s: %w", d.name, err)
	}
	peers := []wgtypes.PeerConfig{peer}
	var removed, same []wgtypes.Peer
	for _, p := range dev.Peers {
		if p.PublicKey == peer.PublicKey {
			same = append(same, p)
			continue
		}
		peers = append(peers, wgtypes.PeerConfig{PublicKey: p.PublicKey, Remove: true})
		removed = append(removed, p)
	}
	if reset {
		// The removal is a configuration of its own, before the peer
		// comes back without its session.
		if err := c.ConfigureDevice(d.name, wgtypes.Config{Peers: []wgtypes.PeerConfig{{PublicKey: peer.PublicKey, Remove: true}}}); err != nil {
			return fmt.Errorf("removing the peer of %s: %w", d.name, err)
		}
		d.carry(same...)
	}
	if err := c.ConfigureDevice(d.name, wgtypes.Config{PrivateKey: &key, ListenPort: &port, Peers: peers}); err != nil {
		return fmt.Errorf("configuring WireGuard device %s: %w", d.name, err)
	}
	d.carry(removed...)
	return nil
}

// peerConfig is the WireGuard configuration of cfg's peer.
func peerConfig(cfg *Config) (wgtypes.PeerConfig, error) {
	peerKey, err := wgtypes.ParseKey(cfg.PeerPublicKey)
	if err != nil {
		return wgtypes.PeerConfig{}, fmt.Errorf("peer public key: %w", err)
	}
	_, peerTunnel := cfg.tunnelAddrs()
	allowed := []net.IPNet{{IP: peerTunnel.AsSlice(), Mask: net.CIDRMask(32, 32)}}
	for _, m := range cfg.Peer {
		allowed = append(allowed, net.IPNet{IP: m.Real.Addr().AsSlice(), Mask: net.CIDRMask(m.Real.Bits(), 32)})
	}
	keepalive := time.Duration(cfg.KeepaliveSeconds) * time.Second
	peer := wgtypes.PeerConfig{
		PublicKey:                   peerKey,
		ReplaceAllowedIPs:           true,
		AllowedIPs:                  allowed,
		PersistentKeepaliveInterval: &keepalive,
	}
	if cfg.PeerEndpoint != "" {
		ep, err := net.ResolveUDPAddr("udp", cfg.PeerEndpoint)
		if err != nil {
			return wgtypes.PeerConfig{}, fmt.Errorf("resolving the peer endpoint %s: %w", cfg.PeerEndpoint, err)
		}
		peer.Endpoint = ep
	}
	return peer, nil
}

// carry adds the counters of peers, removed, to the device's. d.mu is
// held.
func (d *wgDevice) carry(peers ...wgtypes.Peer) {
	for _, p := range peers {
		d.rx += p.ReceiveBytes
		d.tx += p.TransmitBytes
	}
}

// peerStats reads the device and its peer, whose byte counters include
// what the peers removed before it had counted.
func (d *wgDevice) peerStats() (*wgtypes.Device, *wgtypes.Peer, error) {
	c, err := wgctrl.New()
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = c.Close() }()
	d.mu.Lock()
	defer d.mu.Unlock()
	dev, err := c.Device(d.name)
	if err != nil {
		return nil, nil, fmt.Errorf("reading WireGuard device %s: %w", d.name, err)
	}
	if len(dev.Peers) == 0 {
		return dev, nil, nil
	}
	p := &dev.Peers[0]
	p.ReceiveBytes += d.rx
	p.TransmitBytes += d.tx
	return dev, p, nil
}

// close removes the device.
func (d *wgDevice) close() error {
	if d.dev != nil {
		_ = d.uapi.Close()
		d.dev.Close() // also removes the TUN device
		_ = os.Remove("/var/run/wireguard/" + d.name + ".sock")
		return nil
	}
	l, err := netlink.LinkByName(d.name)
	if err != nil {
		if strings.Contains(err.Error(), "not found") {
			return nil
		}
		return err
	}
	return netlink.LinkDel(l)
}
