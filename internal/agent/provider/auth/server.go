// Package auth is the peering authentication service of offload-agent: an
// HTTPS server whose certificate comes from a CA the agent manages itself
// (Secret offload-auth-ca), plus a plain-HTTP health server for the kubelet's
// probes. Consumers pin that CA by the hash peering.CACertHash returns.
package auth

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/pki"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// caLoadTimeout bounds reading or creating the CA Secret at start, so an
// unreachable API server makes the process exit (and restart) instead of
// hanging unready.
const caLoadTimeout = time.Minute

// Options configure a Server.
type Options struct {
	// Namespace is the namespace the agent runs in; it holds the CA Secret.
	Namespace string
	// Listen is the address of the HTTPS server, such as ":8443".
	Listen string
	// HealthProbeBindAddress is the address of the plain-HTTP server that
	// answers /healthz and /readyz, such as ":8081".
	HealthProbeBindAddress string
	// TLSSANs are IP addresses and DNS names added to the serving
	// certificate, on top of the auth Service's names and localhost.
	TLSSANs []string
	// ShutdownTimeout bounds how long in-flight requests may take once the
	// context is cancelled.
	ShutdownTimeout time.Duration
	// Logger receives the server's logs; the zero value discards them.
	Logger klog.Logger
	// SigningKeys, when set, reads the JSON Web Key Set the API server
	// signs ServiceAccount tokens with (/openid/v1/jwks): requests carrying
	// a consumer's credential are then limited per tenant, not per address.
	SigningKeys func(context.Context) ([]byte, error)
}

// NewOptions returns Options with the defaults of the chart's ports.
func NewOptions() Options {
	return Options{Listen: ":8443", HealthProbeBindAddress: ":8081", ShutdownTimeout: 10 * time.Second}
}

// Validate checks the options.
func (o Options) Validate() error {
	if o.Namespace == "" {
		return errors.New("the namespace is not set: pass --namespace or set POD_NAMESPACE")
	}
	if o.Listen == "" {
		return errors.New("--listen must not be empty")
	}
	if o.HealthProbeBindAddress == "" {
		return errors.New("--health-probe-bind-address must not be empty")
	}
	for _, san := range o.TLSSANs {
		if net.ParseIP(san) != nil {
			continue
		}
		if errs := validation.IsWildcardDNS1123Subdomain(san); len(errs) == 0 {
			continue
		}
		if errs := validation.IsDNS1123Subdomain(san); len(errs) > 0 {
			return fmt.Errorf("--tls-san %q is neither an IP address nor a DNS name: %s", san, errs[0])
		}
	}
	return nil
}

// Hosts returns the names and addresses the serving certificate is valid
// for: the auth Service's in-cluster names, the extra TLSSANs, and
// localhost.
func (o Options) Hosts() []string {
	svc := offloadv1alpha1.Auth
	hosts := []string{
		svc,
		svc + "." + o.Namespace,
		svc + "." + o.Namespace + ".svc",
		svc + "." + o.Namespace + ".svc.cluster.local",
	}
	hosts = append(hosts, o.TLSSANs...)
	return append(hosts, "localhost", "127.0.0.1", "::1")
}

// Server is the auth service. Create it with NewServer, add endpoints with
// Handle, then call Run.
type Server struct {
	opts   Options
	client client.Client
	mux    *http.ServeMux
	ready  atomic.Bool
	// limits bound the requests of each source; tests shrink them.
	limits limits
}

// NewServer returns a Server that reads and writes the CA Secret with c.
// It serves GET /healthz on the HTTPS port, and a NotFound Error for
// any path no endpoint handles. Every other request is limited per
// source address: too many failures or requests in flight get a
// TooManyRequests Error at once.
func NewServer(c client.Client, o Options) (*Server, error) {
	if c == nil {
		return nil, errors.New("the auth server needs a Kubernetes client")
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}
	s := &Server{opts: o, client: c, mux: http.NewServeMux(), limits: defaultLimits()}
	s.mux.Handle("/healthz", allowMethods(ok, http.MethodGet, http.MethodHead))
	s.mux.HandleFunc("/", notFound)
	return s, nil
}

// Handle registers an endpoint on the HTTPS server, with the patterns of
// net/http.ServeMux. Call it before Run.
func (s *Server) Handle(pattern string, h http.Handler) {
	s.mux.Handle(pattern, h)
}

// Run starts the health server, loads or creates the CA, issues the serving
// certificate and serves HTTPS until ctx is cancelled. Then it stops
// accepting connections, lets in-flight requests finish within
// ShutdownTimeout and returns nil. It returns an error when the CA cannot
// be loaded or a server fails.
func (s *Server) Run(ctx context.Context) error {
	log := s.opts.Logger
	errc := make(chan error, 2)

	healthLn, err := net.Listen("tcp", s.opts.HealthProbeBindAddress)
	if err != nil {
		return fmt.Errorf("listening on --health-probe-bind-address %s: %w", s.opts.HealthProbeBindAddress, err)
	}
	health := s.newHTTPServer(s.healthHandler())
	go func() { errc <- serve(health, healthLn, "health server") }()
	servers := []*http.Server{health}
	defer func() { s.ready.Store(false); s.shutdown(ctx, servers) }()

	caCtx, cancel := context.WithTimeout(ctx, caLoadTimeout)
	ca, created, err := LoadOrCreateCA(caCtx, s.client, s.opts.Namespace, time.Now())
	cancel()
	if ctx.Err() != nil {
		return nil // stopped while starting
	}
	if err != nil {
		return fmt.Errorf("loading the auth CA: %w", err)
	}
	hash, err := peering.CACertHash(ca.CertPEM)
	if err != nil {
		return err
	}
	log.Info("Using the auth CA", "secret", klog.KRef(s.opts.Namespace, offloadv1alpha1.AuthCASecret), "created", created,
		"caCertHash", hash, "notAfter", ca.Cert.NotAfter.UTC())

	certs, err := pki.NewServingCert(ca, s.opts.Hosts(), log, time.Now)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", s.opts.Listen)
	if err != nil {
		return fmt.Errorf("listening on --listen %s: %w", s.opts.Listen, err)
	}
	limiter := newLimiter(s.limits, log)
	if s.opts.SigningKeys != nil {
		limiter.credentials = newCredentials(s.opts.SigningKeys)
	}
	https := s.newHTTPServer(limiter.wrap(s.mux))
	https.TLSConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: certs.GetCertificate}
	go func() { errc <- serve(https, tls.NewListener(limiter.listen(ln), https.TLSConfig), "HTTPS server") }()
	servers = append(servers, https)
	s.ready.Store(true)
	log.Info("Serving", "https", ln.Addr().String(), "health", healthLn.Addr().String())

	select {
	case <-ctx.Done():
		log.Info("Shutting down")
		return nil
	case err := <-errc:
		return err
	}
}

// Ready reports whether the HTTPS server is serving.
func (s *Server) Ready() bool { return s.ready.Load() }

func (s *Server) healthHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", ok)
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if !s.ready.Load() {
			http.Error(w, "the HTTPS server is not serving", http.StatusServiceUnavailable)
			return
		}
		ok(w, r)
	})
	return mux
}

func (s *Server) newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          newStdLogger(s.opts.Logger.V(2)),
	}
}

// shutdown stops the servers, giving in-flight requests ShutdownTimeout.
func (s *Server) shutdown(ctx context.Context, servers []*http.Server) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.ShutdownTimeout)
	defer cancel()
	for _, srv := range servers {
		if err := srv.Shutdown(ctx); err != nil {
			s.opts.Logger.Error(err, "Stopping a server")
			_ = srv.Close()
		}
	}
}

// serve runs srv on ln and returns nil once the server was shut down.
func serve(srv *http.Server, ln net.Listener, what string) error {
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("%s on %s: %w", what, ln.Addr(), err)
	}
	return nil
}

func ok(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok"))
}
