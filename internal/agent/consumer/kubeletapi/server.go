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
	"strconv"
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
	// Addr is where the first virtual node's kubelet API listens, such as
	// ":10250". Each virtual node gets a port of its own, the lowest free
	// one from Addr's on: the requests of metrics-server and of the API
	// server for a node's metrics and stats do not name the node, so the
	// port tells it. Port 0 gives each node a port the system picks.
	Addr string
	// Resolver finds the provider pod of a consumer pod.
	Resolver Resolver
	// Usage reads what the pods of a virtual node use, for the resource
	// metrics and the summary API; nil serves neither.
	Usage UsageSource
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

// MaxNodePorts is how many ports from Options.Addr's the virtual nodes'
// kubelet APIs may take.
const MaxNodePorts = 100

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
	meter   meter
	host    string
	port    int

	mu sync.Mutex
	// nodes are the listeners of the virtual nodes, by node name.
	nodes map[string]*nodeListener
	// srv serves the listeners once Start runs; nil before and after.
	srv *http.Server
	// errc receives the error of a listener that stopped serving while
	// its node was still served.
	errc chan error
}

// nodeListener is the listener of one virtual node's kubelet API.
type nodeListener struct {
	net.Listener
	node    string
	port    int32
	serving bool
	closed  bool
}

// nodeKey is the context key of the virtual node a connection came in for.
type nodeKey struct{}

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
	host, port, err := net.SplitHostPort(o.Addr)
	if err != nil {
		return nil, fmt.Errorf("the kubelet API server needs an address to listen on, as HOST:PORT: %w", err)
	}
	firstPort, err := strconv.Atoi(port)
	if err != nil || firstPort < 0 || firstPort > 65535 {
		return nil, fmt.Errorf("the kubelet API server's port %q is not a port number", port)
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
	s := &Server{opts: o, log: o.Logger.WithName("kubelet-api"), ca: ca, authn: authn, authz: authz,
		host: host, port: firstPort, nodes: map[string]*nodeListener{}, errc: make(chan error, 1)}
	mux := http.NewServeMux()
	s.attachNodeRoutes(mux)
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

// NodePort returns the port the kubelet API of virtual node node is served
// on, listening on it at the first call: published, the port the node
// published before, when it is free, or else the lowest free port from
// Options.Addr's. Connections are served once Start runs.
func (s *Server) NodePort(node string, published int32) (int32, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.nodes[node]; l != nil {
		return l.port, nil
	}
	ln, err := s.listen(published)
	if err != nil {
		return 0, fmt.Errorf("listening for the kubelet API of virtual node %s: %w", node, err)
	}
	l := &nodeListener{Listener: ln, node: node, port: int32(ln.Addr().(*net.TCPAddr).Port)} //nolint:gosec // a port number
	s.nodes[node] = l
	if s.srv != nil {
		s.serve(l)
	}
	s.log.Info("Serving the kubelet API of a virtual node", "node", node, "address", ln.Addr().String())
	return l.port, nil
}

// listen listens on published when it is one of the node ports and free,
// or else on the lowest free node port.
func (s *Server) listen(published int32) (net.Listener, error) {
	var lc net.ListenConfig
	ctx := context.Background()
	if s.port == 0 {
		return lc.Listen(ctx, "tcp", net.JoinHostPort(s.host, "0"))
	}
	used := map[int]bool{}
	for _, l := range s.nodes {
		used[int(l.port)] = true
	}
	candidates := make([]int, 0, MaxNodePorts+1)
	if p := int(published); p >= s.port && p < s.port+MaxNodePorts && !used[p] {
		candidates = append(candidates, p)
	}
	for p := s.port; p < s.port+MaxNodePorts && p <= 65535; p++ {
		if !used[p] {
			candidates = append(candidates, p)
		}
	}
	var errs []error
	for _, p := range candidates {
		ln, err := lc.Listen(ctx, "tcp", net.JoinHostPort(s.host, strconv.Itoa(p)))
		if err == nil {
			return ln, nil
		}
		if errs = append(errs, err); len(errs) == 3 {
			break
		}
	}
	return nil, fmt.Errorf("no free port from %d to %d: %w", s.port, s.port+MaxNodePorts-1, errors.Join(errs...))
}

// ForgetNode stops serving the kubelet API of virtual node node and frees
// its port.
func (s *Server) ForgetNode(node string) {
	s.mu.Lock()
	l := s.nodes[node]
	delete(s.nodes, node)
	if l != nil {
		l.closed = true
	}
	s.mu.Unlock()
	if l != nil {
		_ = l.Close()
		s.meter.forget(node)
		s.log.Info("Stopped serving the kubelet API of a virtual node", "node", node)
	}
}

// serve serves l with s.srv; s.mu is held.
func (s *Server) serve(l *nodeListener) {
	if l.serving {
		return
	}
	l.serving = true
	srv := s.srv
	go func() {
		err := srv.Serve(tls.NewListener(l, srv.TLSConfig))
		s.mu.Lock()
		forgotten := l.closed || s.srv != srv
		s.mu.Unlock()
		if !forgotten && !errors.Is(err, http.ErrServerClosed) {
			select {
			case s.errc <- fmt.Errorf("serving the kubelet API of virtual node %s on %s: %w", l.node, l.Addr(), err):
			default:
			}
		}
	}()
}

// Start serves the kubelet API of the virtual nodes until ctx is done; call
// it once. The serving certificate is generated in memory, self-signed,
// for Options.IPs and DNSNames.
func (s *Server) Start(ctx context.Context) error {
	cert, err := servingCertificate(s.opts.IPs, s.opts.DNSNames, time.Now())
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go s.ca.Run(ctx, 1)

	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		TLSConfig: &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{cert},
			// Certificates are verified by the authenticator against the
			// current client CA, not by the handshake.
			ClientAuth: tls.RequestClientCert,
			// exec, attach and port-forward upgrade the connection: HTTP/1.1 only.
			NextProtos: []string{"http/1.1"},
		},
		TLSNextProto: map[string]func(*http.Server, *tls.Conn, http.Handler){},
		BaseContext:  func(net.Listener) context.Context { return ctx },
		ConnContext:  connNode,
		ErrorLog:     log.New(errorLogWriter{s.log}, "", 0),
	}
	s.mu.Lock()
	s.srv = srv
	for _, l := range s.nodes {
		s.serve(l)
	}
	s.mu.Unlock()

	var serveErr error
	select {
	case serveErr = <-s.errc:
	case <-ctx.Done():
	}
	s.mu.Lock()
	s.srv = nil
	for _, l := range s.nodes {
		l.serving = false
	}
	s.mu.Unlock()
	// Streams in progress end with the request contexts, which end with ctx.
	cancel()
	shutdownCtx, stop := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer stop()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
	}
	return serveErr
}

// connNode records in the connection's context which virtual node's port
// it came in on.
func connNode(ctx context.Context, c net.Conn) context.Context {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	if nc, ok := c.(nodeConn); ok {
		return context.WithValue(ctx, nodeKey{}, nc.node)
	}
	return ctx
}

// nodeConn is a connection to the port of virtual node node.
type nodeConn struct {
	net.Conn
	node string
}

// Accept tags each connection with the listener's node.
func (l *nodeListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return nodeConn{Conn: c, node: l.node}, nil
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
