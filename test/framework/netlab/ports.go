package netlab

import (
	"fmt"
	"io"
	"net"
	"sync"
)

// portAllocator hands out free loopback TCP ports, never the same one twice
// in a process, so clusters created concurrently do not race for ports the
// way kwokctl's own probing does.
type portAllocator struct {
	mu   sync.Mutex
	used map[int]bool
}

var ports = &portAllocator{used: map[int]bool{}}

// FreePorts returns n distinct free loopback TCP ports that this process
// has not handed out before.
func FreePorts(n int) ([]int, error) { return ports.take(n) }

// take returns n distinct free ports on 127.0.0.1.
func (a *portAllocator) take(n int) ([]int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []int
	var held []net.Listener
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for len(out) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		held = append(held, l)
		p := l.Addr().(*net.TCPAddr).Port
		if a.used[p] {
			continue
		}
		a.used[p] = true
		out = append(out, p)
	}
	return out, nil
}

// FreePort returns a free loopback TCP port that this process has not handed out before.
func FreePort() (int, error) {
	p, err := FreePorts(1)
	if err != nil {
		return 0, err
	}
	return p[0], nil
}

// Forward copies every connection l accepts to and from target, until l
// is closed: an API server that starts answering on an address where
// nothing listened.
func Forward(l net.Listener, target string) {
	for {
		in, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer func() { _ = in.Close() }()
			out, err := net.Dial("tcp", target)
			if err != nil {
				return
			}
			defer func() { _ = out.Close() }()
			go func() { _, _ = io.Copy(out, in) }()
			_, _ = io.Copy(in, out)
		}()
	}
}
