package gateway

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Liveness over the tunnel: each gateway answers a UDP echo on its tunnel
// address (nowhere else: the port is reachable only through the tunnel)
// and probes the peer's every interval. A tunnel whose handshake looks
// fine but carries nothing shows as disconnected.
const (
	probeInterval = 2 * time.Second
	// probeMisses in a row mark the tunnel disconnected, about 10 s.
	probeMisses = 5
)

// liveness tracks the answers to the probes.
type liveness struct {
	mu       sync.Mutex
	lastPong time.Time
	rtt      time.Duration
}

// snapshot returns when the peer last answered and how fast.
func (l *liveness) snapshot() (time.Time, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lastPong, l.rtt
}

// connected tells whether the peer answered within the last probeMisses
// intervals.
func (l *liveness) connected(now time.Time) bool {
	last, _ := l.snapshot()
	return !last.IsZero() && now.Sub(last) < probeMisses*probeInterval
}

// serveEcho answers probes sent to local:livenessPort until ctx ends. The
// address appears with the tunnel device, so binding retries until then.
func serveEcho(ctx context.Context, local netip.Addr) {
	for ctx.Err() == nil {
		c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, livenessPort)))
		if err != nil {
			sleep(ctx, time.Second)
			continue
		}
		go func() { <-ctx.Done(); _ = c.Close() }()
		buf := make([]byte, 64)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				break
			}
			_, _ = c.WriteToUDPAddrPort(buf[:n], from)
		}
		_ = c.Close()
	}
}

// probe sends a numbered probe to the peer every interval, while
// reachable says the peer can be reached (the server waits for the client
// to show up: a packet to a peer without an endpoint only makes WireGuard
// complain), and records the answers, until ctx ends.
func (l *liveness) probe(ctx context.Context, local, peer netip.Addr, reachable func() bool) {
	var c *net.UDPConn
	defer func() {
		if c != nil {
			_ = c.Close()
		}
	}()
	sent := map[uint64]time.Time{}
	var seq uint64
	t := time.NewTicker(probeInterval)
	defer t.Stop()
	for {
		if c == nil {
			var err error
			// Bound to the tunnel address, the probe can only leave through
			// the tunnel.
			if c, err = net.DialUDP("udp4", net.UDPAddrFromAddrPort(netip.AddrPortFrom(local, 0)),
				net.UDPAddrFromAddrPort(netip.AddrPortFrom(peer, livenessPort))); err != nil {
				c = nil
			} else {
				go l.receive(ctx, c, sent)
			}
		}
		if c != nil && reachable() {
			seq++
			var b [8]byte
			binary.BigEndian.PutUint64(b[:], seq)
			l.mu.Lock()
			sent[seq] = time.Now()
			delete(sent, seq-probeMisses*2)
			l.mu.Unlock()
			_, _ = c.Write(b[:])
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func (l *liveness) receive(ctx context.Context, c *net.UDPConn, sent map[uint64]time.Time) {
	buf := make([]byte, 64)
	for ctx.Err() == nil {
		n, err := c.Read(buf)
		if errors.Is(err, net.ErrClosed) {
			return
		}
		if err != nil { // ECONNREFUSED while the peer is down: keep reading
			continue
		}
		if n != 8 {
			continue
		}
		seq := binary.BigEndian.Uint64(buf[:8])
		now := time.Now()
		l.mu.Lock()
		if at, ok := sent[seq]; ok {
			l.lastPong, l.rtt = now, now.Sub(at)
			delete(sent, seq)
		}
		l.mu.Unlock()
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
