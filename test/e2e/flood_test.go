package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/kubectl-offload/kubectl-offload/internal/peering"
	"github.com/kubectl-offload/kubectl-offload/test/framework/netlab"
)

// The chapter of this file runs in
// TestPeeringSurvivesAnOutageRotatesCredentialsAndUnpeersCleanly
// (lifecycle_test.go).

// authFlood is an attacker on a consumer's own address: from network
// namespace netns (a consumer node, whose address the consumer agent's
// traffic leaves by), workers send refreshes with bad tokens to authURL,
// a new connection each, as fast as they are answered.
type authFlood struct {
	stop func()
	wg   sync.WaitGroup
	mu   sync.Mutex
	// answers counts the answers by HTTP status; failed counts requests
	// that got none (a connection refused or closed).
	answers map[int]int
	failed  int
}

func startAuthFlood(ctx context.Context, netns, authURL string, workers int) *authFlood {
	ctx, cancel := context.WithCancel(ctx)
	f := &authFlood{stop: cancel, answers: map[int]int{}}
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	transport := &http.Transport{
		// The attacker does not care whom it talks to.
		TLSClientConfig:   &tls.Config{InsecureSkipVerify: true}, //nolint:gosec // an attacker's client
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := netlab.InNetNS(netns, func() (err error) {
				c, err = dialer.DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}
	client := &http.Client{Transport: transport, Timeout: 10 * time.Second}
	url := strings.TrimSuffix(authURL, "/") + peering.RefreshPath
	for i := range workers {
		bad := fmt.Sprintf("Bearer not-a-credential-%d-%s", i, strings.Repeat("x", 40))
		f.wg.Go(func() {
			for ctx.Err() == nil {
				req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(`{"clusterID":"nobody"}`))
				req.Header.Set("Authorization", bad)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				f.mu.Lock()
				if err != nil {
					if ctx.Err() == nil {
						f.failed++
					}
				} else {
					f.answers[resp.StatusCode]++
					_ = resp.Body.Close()
				}
				f.mu.Unlock()
			}
		})
	}
	return f
}

// end stops the flood and returns what it got.
func (f *authFlood) end() (answers map[int]int, failed int) {
	f.stop()
	f.wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.answers, f.failed
}
