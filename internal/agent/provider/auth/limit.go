package auth

import (
	"container/list"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"k8s.io/klog/v2"

	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// limits bound what one source, the remote address of a connection, may
// cost the auth service, so a flood of bad requests cannot slow down
// legitimate ones. X-Forwarded-For is never trusted: consumers connect
// directly, and a header costs nothing to forge.
type limits struct {
	// failureBurst failed requests (see countsAsFailure) are allowed at
	// once; then one more every failureRefill. While none is left, every
	// request of the source is refused with 429 before any work is done.
	failureBurst  int
	failureRefill time.Duration
	// perSource and total cap the requests in flight.
	perSource, total int
	// connsPerSource and conns cap the open connections. A connection
	// over them, or from a source whose failures bucket is empty, is
	// closed as soon as it is accepted, before the TLS handshake, which
	// is most of what a request costs the service.
	connsPerSource, conns int
	// maxSources caps the table of sources; a source idle for idleAfter
	// is forgotten. idleAfter should exceed failureBurst*failureRefill, so
	// that a forgotten source had its bucket full again anyway.
	maxSources int
	idleAfter  time.Duration
	// logEvery is the least time between two logs of refusals for one source.
	logEvery time.Duration
	// trustedFor is how long a source that made a request with a
	// consumer's credential, or a successful one, keeps its connections
	// past the TLS handshake when its failures bucket is empty: a consumer
	// behind the address of a flood must still be able to present its
	// credential. It spans many refresh periods.
	trustedFor time.Duration
	now        func() time.Time
}

func defaultLimits() limits {
	return limits{
		failureBurst:  10,
		failureRefill: 3 * time.Second,
		perSource:     4,
		total:         64,
		// A client keeps one or two connections; a browser six.
		connsPerSource: 8,
		conns:          512,
		maxSources:     10000,
		idleAfter:      5 * time.Minute,
		logEvery:       time.Minute,
		trustedFor:     24 * time.Hour,
		now:            time.Now,
	}
}

// countsAsFailure reports whether an answer with status spends a token of
// its source's bucket: the refusals a caller could provoke at will.
func countsAsFailure(status int) bool {
	switch status {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound,
		http.StatusMethodNotAllowed, http.StatusConflict, http.StatusRequestEntityTooLarge:
		return true
	}
	return false
}

// limiter applies limits to the requests of an http.Handler.
type limiter struct {
	limits
	log klog.Logger
	// credentials, when set, tells the requests that carry a consumer's
	// credential: they are limited per tenant, not per address.
	credentials *credentials

	mu       sync.Mutex
	sources  map[string]*list.Element // of *source
	recent   *list.List               // most recently seen first
	inFlight int
	open     int // connections
}

// source is what the limiter remembers of one remote address.
type source struct {
	key      string
	failures *rate.Limiter
	inFlight int
	conns    int
	lastSeen time.Time
	// loggedAt is when refusals were last logged; refused counts those
	// since.
	loggedAt time.Time
	refused  int
	// trustedUntil is when the source stops counting as one a consumer
	// uses (limits.trustedFor).
	trustedUntil time.Time
}

func newLimiter(l limits, log klog.Logger) *limiter {
	return &limiter{limits: l, log: log, sources: map[string]*list.Element{}, recent: list.New()}
}

// wrap refuses, with a TooManyRequests Error, the requests over the limits,
// and counts the failures of the others. /healthz is never limited.
func (l *limiter) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/healthz" {
			next.ServeHTTP(w, r)
			return
		}
		address := sourceKey(r.RemoteAddr)
		key := address
		if tenant := l.credentials.tenant(r.Context(), bearerToken(r)); tenant != "" {
			key = "tenant " + tenant
			l.trust(address)
		}
		src, refusal := l.admit(key)
		if refusal != nil {
			w.Header().Set("Retry-After", strconv.Itoa(int(refusal.retryAfter.Seconds())))
			peering.WriteError(w, refusal.err)
			return
		}
		rec := &statusRecorder{ResponseWriter: w}
		defer func() {
			l.release(src, rec.status)
			if rec.status == http.StatusOK {
				l.trust(address)
			}
		}()
		next.ServeHTTP(rec, r)
	})
}

type refusal struct {
	err        *peering.Error
	retryAfter time.Duration // whole seconds, at least one
}

// admit counts a request of key in flight, or says why it is refused.
func (l *limiter) admit(key string) (*source, *refusal) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	src := l.lookup(key, now)
	var ref *refusal
	switch tokens := src.failures.TokensAt(now); {
	case tokens < 1:
		wait := time.Duration((1 - tokens) * float64(l.failureRefill))
		ref = &refusal{retryAfter: wholeSeconds(wait), err: &peering.Error{
			Reason: peering.ReasonTooManyRequests,
			Message: fmt.Sprintf("too many failed requests from this address: wait %s before retrying, "+
				"and check the token: a peering token from `kubectl offload peer generate`, or the tenant's current credentials",
				wholeSeconds(wait)),
			Status: http.StatusTooManyRequests,
		}}
	case src.inFlight >= l.perSource || l.inFlight >= l.total:
		ref = &refusal{retryAfter: time.Second, err: &peering.Error{
			Reason:  peering.ReasonTooManyRequests,
			Message: "too many requests in flight: wait a second and retry, and check the token if requests keep failing",
			Status:  http.StatusTooManyRequests,
		}}
	}
	if ref != nil {
		l.logRefusal(src, ref, now)
		return nil, ref
	}
	src.inFlight++
	l.inFlight++
	return src, nil
}

// trust marks the source of address as one a consumer uses, for trustedFor.
func (l *limiter) trust(address string) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lookup(address, now).trustedUntil = now.Add(l.trustedFor)
}

// bearerToken returns the bearer token of r, "" when it has none: what the
// limiter keys a consumer's requests on, and what /v1/refresh and /v1/unpeer
// authenticate.
func bearerToken(r *http.Request) string {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return ""
	}
	return strings.TrimSpace(token)
}

// release ends a request admitted for src, which answered status.
func (l *limiter) release(src *source, status int) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	src.inFlight--
	l.inFlight--
	if countsAsFailure(status) {
		src.failures.AllowN(now, 1)
	}
	l.touch(src, now)
}

// lookup returns the source of key, remembering a new one when needed,
// after forgetting the idle ones and, when the table is full, the least
// recently seen. Sources with requests in flight or connections open, and
// trusted ones (a consumer made a good request from there: forgetting
// them would let a later flood lock it out), are never forgotten, so the
// table holds at most maxSources plus conns plus the trusted ones.
func (l *limiter) lookup(key string, now time.Time) *source {
	for e := l.recent.Back(); e != nil; {
		prev := e.Prev()
		s := e.Value.(*source)
		if now.Sub(s.lastSeen) <= l.idleAfter {
			break
		}
		if l.forgettable(s, now) {
			l.forget(e)
		}
		e = prev
	}
	if e, ok := l.sources[key]; ok {
		s := e.Value.(*source)
		l.touch(s, now)
		return s
	}
	for e := l.recent.Back(); e != nil && len(l.sources) >= l.maxSources; {
		prev := e.Prev()
		if s := e.Value.(*source); l.forgettable(s, now) {
			l.forget(e)
		}
		e = prev
	}
	s := &source{key: key, failures: rate.NewLimiter(rate.Every(l.failureRefill), l.failureBurst), lastSeen: now}
	l.sources[key] = l.recent.PushFront(s)
	return s
}

// forgettable reports whether the table may drop s.
func (l *limiter) forgettable(s *source, now time.Time) bool {
	return s.inFlight == 0 && s.conns == 0 && !now.Before(s.trustedUntil)
}

func (l *limiter) touch(s *source, now time.Time) {
	s.lastSeen = now
	if e, ok := l.sources[s.key]; ok && e.Value == s {
		l.recent.MoveToFront(e)
	}
}

func (l *limiter) forget(e *list.Element) {
	delete(l.sources, e.Value.(*source).key)
	l.recent.Remove(e)
}

// listen wraps ln so that the connections over the limits are closed as
// soon as they are accepted, before any TLS work.
func (l *limiter) listen(ln net.Listener) net.Listener { return &limitedListener{Listener: ln, l: l} }

type limitedListener struct {
	net.Listener
	l *limiter
}

// Accept returns the next connection within the limits, closing the others.
func (ln *limitedListener) Accept() (net.Conn, error) {
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		src, ok := ln.l.admitConn(sourceKey(c.RemoteAddr().String()))
		if !ok {
			_ = c.Close()
			continue
		}
		return &limitedConn{Conn: c, close: func() { ln.l.releaseConn(src) }}, nil
	}
}

type limitedConn struct {
	net.Conn
	once  sync.Once
	close func()
}

func (c *limitedConn) Close() error {
	c.once.Do(c.close)
	return c.Conn.Close()
}

// admitConn counts an open connection of key, or says it must be closed: its
// source failed too often, or holds too many, or the service does.
func (l *limiter) admitConn(key string) (*source, bool) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	src := l.lookup(key, now)
	var why string
	switch {
	case src.failures.TokensAt(now) < 1 && !now.Before(src.trustedUntil):
		why = "too many failed requests from this address: closing its connections before the TLS handshake"
	case src.conns >= l.connsPerSource:
		why = fmt.Sprintf("more than %d connections open from this address", l.connsPerSource)
	case l.open >= l.conns:
		why = fmt.Sprintf("more than %d connections open", l.conns)
	}
	if why != "" {
		l.logRefusal(src, &refusal{err: &peering.Error{Message: why}}, now)
		return nil, false
	}
	src.conns++
	l.open++
	return src, true
}

// releaseConn ends a connection admitted for src.
func (l *limiter) releaseConn(src *source) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	src.conns--
	l.open--
	l.touch(src, now)
}

// logRefusal logs the refusals of src at most once every logEvery. The log
// names the address, never anything of the request.
func (l *limiter) logRefusal(src *source, ref *refusal, now time.Time) {
	src.refused++
	if !src.loggedAt.IsZero() && now.Sub(src.loggedAt) < l.logEvery {
		return
	}
	l.log.Info("Refusing requests from a source", "source", src.key, "refused", src.refused, "why", ref.err.Message)
	src.loggedAt = now
	src.refused = 0
}

// sourceKey returns the address remoteAddr comes from: the IP, or for IPv6
// its /64, which one host usually holds whole.
func sourceKey(remoteAddr string) string {
	ap, err := netip.ParseAddrPort(remoteAddr)
	if err != nil {
		return remoteAddr // not from a TCP listener; one source for all
	}
	ip := ap.Addr().Unmap()
	if ip.Is4() {
		return ip.String()
	}
	return netip.PrefixFrom(ip, 64).Masked().String()
}

func wholeSeconds(d time.Duration) time.Duration {
	return time.Duration(math.Max(1, math.Ceil(d.Seconds()))) * time.Second
}

// statusRecorder remembers the status a handler answered.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(status int) {
	if r.status == 0 {
		r.status = status
	}
	r.ResponseWriter.WriteHeader(status)
}

func (r *statusRecorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = http.StatusOK
	}
	return r.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }
