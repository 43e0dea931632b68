package auth

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/go-logr/logr/funcr"
	authenticationv1 "k8s.io/api/authentication/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
	"github.com/kubectl-offload/kubectl-offload/internal/scheme"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

// liftedLimits are limits no test reaches: the tests of the peering
// endpoints send many failing and concurrent requests from 127.0.0.1 on
// purpose (newPeeringEnv); the tests here set the limits they test.
func liftedLimits() limits {
	l := defaultLimits()
	l.failureBurst, l.perSource, l.total = math.MaxInt32, math.MaxInt32, math.MaxInt32
	l.connsPerSource, l.conns = math.MaxInt32, math.MaxInt32
	return l
}

// request is one kind of request a test source sends.
type request struct{ method, path, body, bearer string }

var (
	badRefresh = request{http.MethodPost, peering.RefreshPath, `{"clusterID":"c"}`, "not-a-token"}
	succeed    = request{http.MethodPost, "/test/ok", "", ""}
	fail       = request{http.MethodPost, "/test/fail", "", ""}
	healthz    = request{http.MethodGet, "/healthz", "", ""}
)

func TestFailedRequestsFromOneSourceAreRefusedOnceItsBucketIsEmpty(t *testing.T) {
	// Limits of testLimits: 3 failures at once, then one every 3s.
	type step struct {
		advance time.Duration // moves the clock first
		from    string
		req     request
		n       int
		want    int
	}
	for _, tt := range []struct {
		name        string
		steps       []step
		wantReviews int32
	}{
		{
			name: "a source sending bad tokens to /v1/refresh gets 429 after its burst, and no token is reviewed for those",
			steps: []step{
				{from: "127.0.0.1", req: badRefresh, n: 3, want: http.StatusUnauthorized},
				{from: "127.0.0.1", req: badRefresh, n: 5, want: http.StatusTooManyRequests},
			},
			wantReviews: 3,
		},
		{
			name: "another source is not affected by a refused one",
			steps: []step{
				{from: "127.0.0.1", req: badRefresh, n: 3, want: http.StatusUnauthorized},
				{from: "127.0.0.1", req: badRefresh, n: 1, want: http.StatusTooManyRequests},
				{from: "127.0.0.2", req: badRefresh, n: 3, want: http.StatusUnauthorized},
				{from: "127.0.0.2", req: badRefresh, n: 1, want: http.StatusTooManyRequests},
				{from: "127.0.0.1", req: badRefresh, n: 1, want: http.StatusTooManyRequests},
			},
			wantReviews: 6,
		},
		{
			name: "successes do not spend the bucket, but are refused while it is empty",
			steps: []step{
				{from: "127.0.0.1", req: succeed, n: 20, want: http.StatusOK},
				{from: "127.0.0.1", req: fail, n: 3, want: http.StatusUnauthorized},
				{from: "127.0.0.1", req: succeed, n: 1, want: http.StatusTooManyRequests},
			},
		},
		{
			name: "the bucket refills one failure every 3s",
			steps: []step{
				{from: "127.0.0.1", req: fail, n: 3, want: http.StatusUnauthorized},
				{advance: 2 * time.Second, from: "127.0.0.1", req: fail, n: 1, want: http.StatusTooManyRequests},
				{advance: 1100 * time.Millisecond, from: "127.0.0.1", req: fail, n: 1, want: http.StatusUnauthorized},
				{from: "127.0.0.1", req: fail, n: 1, want: http.StatusTooManyRequests},
				{advance: 10 * time.Second, from: "127.0.0.1", req: fail, n: 3, want: http.StatusUnauthorized},
				{from: "127.0.0.1", req: succeed, n: 1, want: http.StatusTooManyRequests},
			},
		},
		{
			name: "unknown paths, wrong methods and malformed bodies count, and /healthz is never refused",
			steps: []step{
				{from: "127.0.0.1", req: request{http.MethodPost, "/v1/nope", "{}", ""}, n: 1, want: http.StatusNotFound},
				{from: "127.0.0.1", req: request{http.MethodGet, peering.RefreshPath, "", ""}, n: 1, want: http.StatusMethodNotAllowed},
				{from: "127.0.0.1", req: request{http.MethodPost, peering.RefreshPath, "{", "x"}, n: 1, want: http.StatusBadRequest},
				{from: "127.0.0.1", req: succeed, n: 1, want: http.StatusTooManyRequests},
				{from: "127.0.0.1", req: healthz, n: 3, want: http.StatusOK},
			},
		},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := startLimitedServer(t)
			for _, st := range tt.steps {
				s.clock.advance(st.advance)
				for range st.n {
					s.send(t, st.from, st.req).want(t, st.want)
				}
			}
			if got := s.reviews.Load(); got != tt.wantReviews {
				t.Errorf("%d TokenReviews, want %d", got, tt.wantReviews)
			}
		})
	}
}

func TestRequestsOverTheConcurrencyCapsAreRefusedAtOnce(t *testing.T) {
	// Limits of testLimits: 2 in flight per source, 3 in all.
	for _, tt := range []struct {
		name  string
		held  []string // sources with a request held in the handler
		from  string
		req   request
		want  int
		after int // the same request once the held ones are done
	}{
		{"a source with 2 requests in flight is refused", []string{"127.0.0.1", "127.0.0.1"}, "127.0.0.1", succeed, http.StatusTooManyRequests, http.StatusOK},
		{"another source is served while one is at its cap", []string{"127.0.0.1", "127.0.0.1"}, "127.0.0.2", succeed, http.StatusOK, http.StatusOK},
		{"every source is refused once 3 are in flight in all", []string{"127.0.0.1", "127.0.0.1", "127.0.0.2"}, "127.0.0.3", succeed, http.StatusTooManyRequests, http.StatusOK},
		{"/healthz is served once 3 are in flight in all", []string{"127.0.0.1", "127.0.0.1", "127.0.0.2"}, "127.0.0.3", healthz, http.StatusOK, http.StatusOK},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := startLimitedServer(t)
			var wg sync.WaitGroup
			held := make([]answer, len(tt.held))
			for i, from := range tt.held {
				wg.Go(func() { held[i] = s.send(t, from, request{http.MethodPost, "/test/hold", "", ""}) })
				<-s.entered // in the handler: counted in flight
			}
			s.send(t, tt.from, tt.req).want(t, tt.want)
			close(s.release)
			wg.Wait()
			for _, a := range held {
				a.want(t, http.StatusOK)
			}
			s.send(t, tt.from, tt.req).want(t, tt.after)
		})
	}
}

func TestConnectionsOverTheLimitsAreClosedBeforeTheTLSHandshake(t *testing.T) {
	s := startLimitedServer(t)
	host := strings.TrimPrefix(s.url, "https://")
	// handshake opens a new connection from ip and says whether the
	// server went through a TLS handshake on it.
	handshake := func(ip string) error {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
		c, err := tls.DialWithDialer(d, "tcp", host, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // only the handshake is tested
		if err == nil {
			_ = c.Close()
		}
		return err
	}

	t.Run("a source whose failures bucket is empty gets 429 on its open connection, and no new one", func(t *testing.T) {
		for range 3 {
			s.send(t, "127.0.0.3", fail).want(t, http.StatusUnauthorized)
		}
		s.send(t, "127.0.0.3", succeed).want(t, http.StatusTooManyRequests)
		if err := handshake("127.0.0.3"); err == nil {
			t.Fatal("a new connection from the refused source was served a TLS handshake")
		}
		if err := handshake("127.0.0.4"); err != nil {
			t.Fatalf("another source: %v", err)
		}
		s.clock.advance(3 * time.Second) // one failure token back
		if err := handshake("127.0.0.3"); err != nil {
			t.Fatalf("the source once its bucket refilled: %v", err)
		}
	})

	t.Run("a source holding its connections' worth gets no more until it closes one", func(t *testing.T) {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.5")}}
		for range defaultLimits().connsPerSource {
			c, err := d.Dial("tcp", host)
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, c)
		}
		// The server accepts them one by one: poll until the next is closed.
		framework.Eventually(t, 10*time.Second, "a connection over the per-source cap was served", func(context.Context) bool {
			return handshake("127.0.0.5") != nil
		})
		if err := handshake("127.0.0.6"); err != nil {
			t.Fatalf("another source: %v", err)
		}
		_ = held[0].Close()
		held = held[1:]
		framework.Eventually(t, 10*time.Second, "the source is still refused after closing a connection", func(context.Context) bool {
			return handshake("127.0.0.5") == nil
		})
	})
}

func TestALegitimateRefreshSucceedsDuringAFloodOfBadTokensFromAnotherSource(t *testing.T) {
	const (
		workers   = 32 // the attacker's connections at once
		refreshes = 7  // legitimate refreshes measured, before and during
	)
	e := newPeeringEnvWith(t, defaultLimits())
	c, cred := e.peered(t)
	token := cred.Token
	refresh := func() time.Duration {
		start := time.Now()
		r := e.post(t, peering.RefreshPath, peering.RefreshRequest{ClusterID: c.id}, token)
		if r.status != http.StatusOK {
			t.Fatalf("the legitimate refresh: %d %s", r.status, r.body)
		}
		token = r.response(t).Credentials.Token
		return time.Since(start)
	}
	median := func(ds []time.Duration) time.Duration {
		slices.Sort(ds)
		return ds[len(ds)/2].Round(time.Millisecond)
	}
	var quiet []time.Duration
	for range refreshes {
		quiet = append(quiet, refresh())
	}

	// The attacker opens a new connection for every request, as a flood
	// does, and keeps at it until the legitimate refreshes are done.
	attacker := clientFrom(t, getCASecret(t, e.admin, e.namespace).Data[offloadv1alpha1.AuthCACertKey], "127.0.0.2")
	attacker.Transport.(*http.Transport).DisableKeepAlives = true
	var (
		wg                   sync.WaitGroup
		stop                 = make(chan struct{})
		mu                   sync.Mutex
		count                = map[int]int{}
		closed, transportErr int
	)
	for i := range workers {
		bad := fmt.Sprintf("bad-token-%d-%s", i, strings.Repeat("x", 32))
		e.remember(bad)
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				a, err := do(attacker, e.url, request{http.MethodPost, peering.RefreshPath, fmt.Sprintf(`{"clusterID":%q}`, c.id), bad})
				mu.Lock()
				switch {
				case err == nil:
					count[a.status]++
				case strings.Contains(err.Error(), "EOF") || strings.Contains(err.Error(), "connection reset"):
					closed++
				default:
					transportErr++
				}
				mu.Unlock()
			}
		})
	}
	began := time.Now()
	var during []time.Duration
	for range refreshes {
		during = append(during, refresh())
	}
	close(stop)
	wg.Wait()
	lasted := time.Since(began)

	t.Logf("flood from 127.0.0.2 for %s, %d connections at a time: %d closed before the TLS handshake, %d refused with 429, %d answered 401, %d other transport errors",
		lasted.Round(time.Millisecond), workers, closed, count[http.StatusTooManyRequests], count[http.StatusUnauthorized], transportErr)
	t.Logf("legitimate refresh from 127.0.0.1 (median of %d, max): %s, %s without a flood; %s, %s during it (attacker, server and API server share this machine's cores)",
		refreshes, median(quiet), slices.Max(quiet).Round(time.Millisecond), median(during), slices.Max(during).Round(time.Millisecond))
	// At most the burst, those in flight when it ran out, and the refills.
	l := defaultLimits()
	if most := l.failureBurst + l.perSource + int(lasted/l.failureRefill); count[http.StatusUnauthorized] > most {
		t.Errorf("%d bad tokens were reviewed in %s, want at most %d", count[http.StatusUnauthorized], lasted, most)
	}
	if closed == 0 {
		t.Error("no connection of the flood was closed before the TLS handshake")
	}
}

func TestTheSourceTableStaysBounded(t *testing.T) {
	for _, tt := range []struct {
		name string
		// seen are the sources, one request each, in order; a source
		// ending in "*" keeps its request in flight, one ending in "!" is
		// trusted (a consumer's good request). "+Ns" moves the clock.
		seen []string
		want []string // the remembered sources, most recently seen first
	}{
		{"a source idle for longer than 5m is forgotten", []string{"a", "b", "+4m", "b", "+2m", "c"}, []string{"c", "b"}},
		{"when the table is full the least recently seen source is forgotten", []string{"a", "b", "c", "a", "d"}, []string{"d", "a", "c"}},
		{"a source with a request in flight is never forgotten", []string{"a*", "b", "c", "d", "+10m", "e"}, []string{"e", "a"}},
		{"a trusted source is forgotten only once its trust ends", []string{"a!", "b", "c", "d", "+10m", "e", "+25h", "f"}, []string{"f"}},
		{"a trusted source outlives idle ones", []string{"a!", "b", "c", "d", "+10m", "e"}, []string{"e", "a"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			l := newLimiter(testLimits(clock), funcr.New(func(string, string) {}, funcr.Options{}))
			for _, s := range tt.seen {
				if d, ok := strings.CutPrefix(s, "+"); ok {
					clock.advance(mustDuration(t, d))
					continue
				}
				key, hold := strings.CutSuffix(s, "*")
				key, trusted := strings.CutSuffix(key, "!")
				src, ref := l.admit(key)
				if ref != nil {
					t.Fatalf("%s refused: %s", key, ref.err.Message)
				}
				if !hold {
					l.release(src, http.StatusOK)
				}
				if trusted {
					l.trust(key)
				}
			}
			var got []string
			for e := l.recent.Front(); e != nil; e = e.Next() {
				got = append(got, e.Value.(*source).key)
			}
			if !slices.Equal(got, tt.want) || len(l.sources) != len(tt.want) {
				t.Errorf("remembered %v (%d in the map), want %v", got, len(l.sources), tt.want)
			}
		})
	}
}

func TestRefusalsAreLoggedAtMostOncePerSourcePerMinute(t *testing.T) {
	clock := newFakeClock()
	var lines []string
	lim := testLimits(clock)
	lim.failureRefill = time.Hour // the bucket stays empty
	l := newLimiter(lim, funcr.New(func(_, args string) { lines = append(lines, args) }, funcr.Options{}))
	for _, key := range []string{"a", "b"} {
		for range 3 {
			src, _ := l.admit(key)
			l.release(src, http.StatusUnauthorized)
		}
	}
	for _, tt := range []struct {
		name      string
		advance   time.Duration
		from      string
		n         int
		wantLines int
	}{
		{"the first refusal of a source is logged", 0, "a", 1, 1},
		{"more refusals within the minute are not", 30 * time.Second, "a", 100, 1},
		{"another source's refusal is logged", 0, "b", 5, 2},
		{"a refusal a minute after the first log is logged again", 31 * time.Second, "a", 1, 3},
	} {
		clock.advance(tt.advance)
		for range tt.n {
			if _, ref := l.admit(tt.from); ref == nil {
				t.Fatalf("%s: %s was admitted with an empty bucket", tt.name, tt.from)
			}
		}
		if len(lines) != tt.wantLines {
			t.Errorf("%s: %d log lines, want %d:\n%s", tt.name, len(lines), tt.wantLines, strings.Join(lines, "\n"))
		}
	}
	if last := lines[len(lines)-1]; !strings.Contains(last, `"refused"=101`) {
		t.Errorf("the last log line %s does not count the 101 refusals since the first", last)
	}
}

func TestRetryAfterIsTheWaitForTheNextFailureToken(t *testing.T) {
	clock := newFakeClock()
	l := newLimiter(testLimits(clock), funcr.New(func(string, string) {}, funcr.Options{}))
	for range 3 {
		src, _ := l.admit("a")
		l.release(src, http.StatusForbidden)
	}
	for _, tt := range []struct {
		name    string
		advance time.Duration
		want    time.Duration
	}{
		{"right after the last failure it is the whole refill period", 0, 3 * time.Second},
		{"later it is rounded up to whole seconds", 1500 * time.Millisecond, 2 * time.Second},
		{"it is never below a second", 1400 * time.Millisecond, time.Second},
	} {
		clock.advance(tt.advance)
		_, ref := l.admit("a")
		if ref == nil || ref.retryAfter != tt.want {
			t.Errorf("%s: refusal %+v, want Retry-After %s", tt.name, ref, tt.want)
		}
	}
}

func TestTheSourceIsTheRemoteIPOrItsIPv6Slash64(t *testing.T) {
	for _, tt := range []struct{ name, remoteAddr, want string }{
		{"an IPv4 address is its own source", "192.0.2.7:51234", "192.0.2.7"},
		{"an IPv4-mapped IPv6 address is the IPv4 one", "[::ffff:192.0.2.7]:51234", "192.0.2.7"},
		{"an IPv6 address counts with its /64", "[2001:db8:1:2:3:4:5:6]:443", "2001:db8:1:2::/64"},
		{"an address that is not IP:port is its own source", "@unix", "@unix"},
	} {
		if got := sourceKey(tt.remoteAddr); got != tt.want {
			t.Errorf("%s: sourceKey(%q) = %q, want %q", tt.name, tt.remoteAddr, got, tt.want)
		}
	}
}

// testLimits are small limits on clock: 3 failures then one every 3s, 2
// requests in flight per source and 3 in all, 3 sources idle for 5m at most.
func testLimits(clock *fakeClock) limits {
	l := defaultLimits()
	l.failureBurst, l.failureRefill = 3, 3*time.Second
	l.perSource, l.total = 2, 3
	l.maxSources, l.idleAfter = 3, 5*time.Minute
	l.now = clock.now
	return l
}

// limitedServer is an auth Server with testLimits, the real peering
// endpoints and test ones: /test/ok, /test/fail (401) and /test/hold, which
// signals entered and answers 200 once release is closed.
type limitedServer struct {
	url     string
	caPEM   []byte
	clock   *fakeClock
	reviews atomic.Int32 // TokenReviews the peering endpoints created
	entered chan struct{}
	release chan struct{}
	clients sync.Map // source IP -> *http.Client
}

func startLimitedServer(t *testing.T) *limitedServer {
	t.Helper()
	cfg := envtest.APIServer(t)
	c, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	ns := envtest.NewNamespace(t, c, "limit")
	s := &limitedServer{clock: newFakeClock(), entered: make(chan struct{}), release: make(chan struct{})}
	counting := interceptor.NewClient(c, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if _, ok := obj.(*authenticationv1.TokenReview); ok {
				s.reviews.Add(1)
			}
			return c.Create(ctx, obj, opts...)
		},
	})
	p, err := NewPeering(counting, PeeringOptions{Namespace: ns, APIServerURL: cfg.Host, CredentialExpiration: testCredentialExpiration})
	if err != nil {
		t.Fatal(err)
	}
	run := startServerWith(t, c, ns, func(srv *Server) {
		srv.limits = testLimits(s.clock)
		p.Register(srv)
		srv.Handle("/test/ok", http.HandlerFunc(ok))
		srv.Handle("/test/fail", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { peering.WriteError(w, unauthorized()) }))
		srv.Handle("/test/hold", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.entered <- struct{}{}
			select {
			case <-s.release:
			case <-r.Context().Done():
			}
			ok(w, r)
		}))
	})
	s.url = "https://" + run.https
	s.caPEM = getCASecret(t, c, ns).Data[offloadv1alpha1.AuthCACertKey]
	return s
}

// send sends req from the source address from.
func (s *limitedServer) send(t *testing.T, from string, req request) answer {
	t.Helper()
	c, ok := s.clients.Load(from)
	if !ok {
		c, _ = s.clients.LoadOrStore(from, clientFrom(t, s.caPEM, from))
	}
	a, err := do(c.(*http.Client), s.url, req)
	if err != nil {
		t.Errorf("%s %s from %s: %v", req.method, req.path, from, err)
	}
	return a
}

// clientFrom returns an HTTPS client trusting caPEM whose connections come
// from the loopback address ip; Linux routes all of 127/8 to lo.
func clientFrom(t *testing.T, caPEM []byte, ip string) *http.Client {
	t.Helper()
	c := clientTrusting(t, caPEM, "")
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	c.Transport.(*http.Transport).DialContext = d.DialContext
	return c
}

// answer is what a request got.
type answer struct {
	status     int
	retryAfter string
	body       []byte
}

// do sends req to the server at url with c; it is safe in any goroutine.
func do(c *http.Client, url string, req request) (answer, error) {
	r, err := http.NewRequest(req.method, url+req.path, strings.NewReader(req.body))
	if err != nil {
		return answer{}, err
	}
	r.Header.Set("Content-Type", "application/json")
	if req.bearer != "" {
		r.Header.Set("Authorization", "Bearer "+req.bearer)
	}
	resp, err := c.Do(r)
	if err != nil {
		return answer{}, err
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	return answer{status: resp.StatusCode, retryAfter: resp.Header.Get("Retry-After"), body: body}, err
}

// want checks the status and, for a 429, the Retry-After header and the
// TooManyRequests Error.
func (a answer) want(t *testing.T, status int) {
	t.Helper()
	if a.status != status {
		t.Fatalf("status %d (%s), want %d", a.status, a.body, status)
	}
	if status != http.StatusTooManyRequests {
		return
	}
	if secs, err := strconv.Atoi(a.retryAfter); err != nil || secs < 1 {
		t.Errorf("Retry-After %q, want whole seconds, at least 1", a.retryAfter)
	}
	got := reply{status: a.status, body: a.body}.error(t)
	if got.Reason != peering.ReasonTooManyRequests || !strings.Contains(got.Message, "wait") || !strings.Contains(got.Message, "token") {
		t.Errorf("error %+v, want a TooManyRequests that says to wait and check the token", got)
	}
}

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func mustDuration(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A consumer behind the address of a flood (one NAT, one node's
// masquerade) keeps refreshing: its credential is verified by signature and
// limited per tenant; a token forged for its ServiceAccount is not.
func TestARefreshSucceedsDuringAFloodOfBadTokensFromItsOwnAddress(t *testing.T) {
	e := newPeeringEnvWith(t, defaultLimits())
	c, cred := e.peered(t)
	flood := func(bearer string) reply {
		return e.post(t, peering.RefreshPath, peering.RefreshRequest{ClusterID: c.id}, bearer)
	}
	e.remember("not-a-token")
	drained := false
	for range 10 * defaultLimits().failureBurst {
		if flood("not-a-token").status == http.StatusTooManyRequests {
			drained = true
			break
		}
	}
	if !drained {
		t.Fatal("the flood of bad tokens was never refused: the address's bucket does not empty")
	}

	// Signed by a key of the attacker's, naming the consumer's ServiceAccount.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.ES256, Key: key}, (&jose.SignerOptions{}).WithHeader("kid", "forged"))
	if err != nil {
		t.Fatal(err)
	}
	subject := "system:serviceaccount:" + offloadv1alpha1.TenantNamespace(c.name) + ":" + offloadv1alpha1.ConsumerServiceAccount
	forged, err := jwt.Signed(signer).Claims(jwt.Claims{Subject: subject, Expiry: jwt.NewNumericDate(time.Now().Add(time.Hour))}).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	e.remember(forged)
	if r := flood(forged); r.status != http.StatusTooManyRequests {
		t.Errorf("a token forged for the consumer's ServiceAccount: %d %s, want 429 (it spends the address's bucket)", r.status, r.body)
	}

	r := flood(cred.Token)
	if r.status != http.StatusOK {
		t.Fatalf("the consumer's refresh from the flooded address: %d %s, want 200", r.status, r.body)
	}
	// A new connection from the address is not closed before the TLS
	// handshake: the consumer could not present its credential.
	fresh := clientTrusting(t, getCASecret(t, e.admin, e.namespace).Data[offloadv1alpha1.AuthCACertKey], "")
	fresh.Transport.(*http.Transport).DisableKeepAlives = true
	body, err := json.Marshal(peering.RefreshRequest{ClusterID: c.id})
	if err != nil {
		t.Fatal(err)
	}
	got, err := do(fresh, e.url, request{http.MethodPost, peering.RefreshPath, string(body), r.response(t).Credentials.Token})
	if err != nil || got.status != http.StatusOK {
		t.Fatalf("the consumer's refresh on a new connection from the flooded address: %+v, %v; want 200", got, err)
	}
}
