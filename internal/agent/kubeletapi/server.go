// Package kubeletapi serves the kubelet HTTP API of the agent's virtual
// nodes: the consumer's API server proxies kubectl logs, exec, attach and
// port-forward for pods on a virtual node to it, and it forwards them to the
// provider cluster where the pods really run. Requests are authenticated and
// authorized like the kubelet does: client certificates of the cluster's
// client CA or bearer tokens (TokenReview), and SubjectAccessReviews for
// nodes/proxy of the pod's virtual node.
package kubeletapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// DefaultClientCAConfigMap is the ConfigMap the API server publishes its
// client CA in, under the key ClientCAKey.
var DefaultClientCAConfigMap = types.NamespacedName{Namespace: "kube-system", Name: "extension-apiserver-authentication"}

// ClientCAKey is the key of the client CA bundle in the client CA ConfigMap.
const ClientCAKey = "client-ca-file"

// Options configure a Server.
type Options struct {
	// Addr is the address to listen on, such as ":10250"; ignored when
	// Listener is set.
	Addr string
	// Listener, when set, is used instead of listening on Addr.
	Listener net.Listener
	// Resolver finds the provider pod of a consumer pod.
	Resolver Resolver
	// Kube is a client of the consumer cluster, for TokenReviews,
	// SubjectAccessReviews and the client CA ConfigMap.
	Kube kubernetes.Interface
	// IPs are the IP addresses of the serving certificate: the addresses
	// the virtual nodes publish.
	IPs []net.IP
	// DNSNames are the DNS names of the serving certificate.
	DNSNames []string
	// ClientCAConfigMap holds the client CA bundle under ClientCAKey;
	// empty means DefaultClientCAConfigMap.
	ClientCAConfigMap types.NamespacedName
	// Logger is the logger of the server.
	Logger klog.Logger
}

// Server is the kubelet API endpoint of all the agent's virtual nodes. It
// is a controller-runtime manager.Runnable that needs leader election, like
// the virtual nodes it serves.
//
// Its consumer client needs create on tokenreviews.authentication.k8s.io
// and subjectaccessreviews.authorization.k8s.io, and get, list and watch on
// the client CA ConfigMap (in kube-system, the Role
// extension-apiserver-authentication-reader grants it).
type Server struct {
	opts    Options
	log     klog.Logger
	ca      *dynamiccertificates.ConfigMapCAController
	authn   authenticator.Request
	authz   authorizer.Authorizer
	handler http.Handler

	mu   sync.Mutex
	addr net.Addr
}

// The retry backoff of TokenReviews and SubjectAccessReviews, the one of
// k8s.io/apiserver/pkg/server/options.DefaultAuthWebhookRetryBackoff.
var webhookBackoff = wait.Backoff{Duration: 500 * time.Millisecond, Factor: 1.5, Jitter: 0.2, Steps: 5}

// streamTimeout is the idle and creation timeout of exec, attach and
// port-forward streams.
const streamTimeout = 4 * time.Hour

// New returns a Server for o. It does not listen until Start.
func New(o Options) (*Server, error) {
	if o.Resolver == nil || o.Kube == nil {
		return nil, errors.New("the kubelet API server needs a resolver and a consumer client")
	}
	if o.Listener == nil && o.Addr == "" {
		return nil, errors.New("the kubelet API server needs an address to listen on")
	}
	if o.ClientCAConfigMap == (types.NamespacedName{}) {
		o.ClientCAConfigMap = DefaultClientCAConfigMap
	}
	ca, err := dynamiccertificates.NewDynamicCAFromConfigMapController("client-ca",
		o.ClientCAConfigMap.Namespace, o.ClientCAConfigMap.Name, ClientCAKey, o.Kube)
	if err != nil {
		return nil, fmt.Errorf("watching the client CA in ConfigMap %s: %w", o.ClientCAConfigMap, err)
	}
	// The kubelet's defaults: --authentication-token-webhook-cache-ttl=2m,
	// --authorization-webhook-cache-authorized-ttl=5m, unauthorized 30s.
	authn, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                          &apiserver.AnonymousAuthConfig{Enabled: false},
		TokenAccessReviewClient:            o.Kube.AuthenticationV1(),
		TokenAccessReviewTimeout:           10 * time.Second,
		WebhookRetryBackoff:                &webhookBackoff,
		CacheTTL:                           2 * time.Minute,
		ClientCertificateCAContentProvider: ca,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("building the kubelet API authenticator: %w", err)
	}
	authz, err := authorizerfactory.DelegatingAuthorizerConfig{
		SubjectAccessReviewClient: o.Kube.AuthorizationV1(),
		AllowCacheTTL:             5 * time.Minute,
		DenyCacheTTL:              30 * time.Second,
		WebhookRetryBackoff:       &webhookBackoff,
	}.New()
	if err != nil {
		return nil, fmt.Errorf("building the kubelet API authorizer: %w", err)
	}
	s := &Server{opts: o, log: o.Logger.WithName("kubelet-api"), ca: ca, authn: authn, authz: authz}
	mux := http.NewServeMux()
	api.AttachPodRoutes(api.PodHandlerConfig{
		RunInContainer:    s.runInContainer,
		AttachToContainer: s.attachToContainer,
		PortForward:       s.portForward,
		GetContainerLogs:  s.containerLogs,
		// The kubelet closes idle streams after 4h (--streaming-connection-
		// idle-timeout); virtual-kubelet's 30s default would end a quiet
		// kubectl exec -it. Both timeouts get 4h because virtual-kubelet
		// swaps them for port-forward.
		StreamIdleTimeout:     streamTimeout,
		StreamCreationTimeout: streamTimeout,
	}, mux, false)
	s.handler = mux
	return s, nil
}

// Start serves the kubelet API until ctx is done; call it once. The serving
// certificate is generated in memory, self-signed, for Options.IPs and
// DNSNames.
func (s *Server) Start(ctx context.Context) error {
	cert, err := servingCertificate(s.opts.IPs, s.opts.DNSNames, time.Now())
	if err != nil {
		return err
	}
	ln := s.opts.Listener
	if ln == nil {
		var lc net.ListenConfig
		if ln, err = lc.Listen(ctx, "tcp", s.opts.Addr); err != nil {
			return fmt.Errorf("listening for the kubelet API on %s: %w", s.opts.Addr, err)
		}
	}
	s.mu.Lock()
	s.addr = ln.Addr()
	s.mu.Unlock()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.ca.Run(ctx, 1)

	tlsConfig := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		// Certificates are verified by the authenticator against the
		// current client CA, not by the handshake.
		ClientAuth: tls.RequestClientCert,
		// exec, attach and port-forward upgrade the connection: HTTP/1.1 only.
		NextProtos: []string{"http/1.1"},
	}
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		TLSNextProto:      map[string]func(*http.Server, *tls.Conn, http.Handler){},
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ErrorLog:          log.New(errorLogWriter{s.log}, "", 0),
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(tls.NewListener(ln, tlsConfig)) }()
	s.log.Info("Serving the kubelet API of the virtual nodes", "address", ln.Addr().String())

	select {
	case err := <-errc:
		return fmt.Errorf("serving the kubelet API on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	// Streams in progress end with the request contexts, which end with ctx.
	shutdownCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer stop()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serving the kubelet API on %s: %w", ln.Addr(), err)
	}
	return nil
}

// Addr returns the address the server listens on, or nil before Start has
// started listening.
func (s *Server) Addr() net.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// NeedLeaderElection reports that the Server runs on the leader only, where
// the virtual nodes it serves run.
func (s *Server) NeedLeaderElection() bool { return true }

// errorLogWriter logs the errors of the HTTP server, such as failed TLS
// handshakes, at verbosity 2.
type errorLogWriter struct{ log klog.Logger }

func (w errorLogWriter) Write(p []byte) (int, error) {
	w.log.V(2).Info("Kubelet API connection error", "error", strings.TrimSpace(string(p)))
	return len(p), nil
}
