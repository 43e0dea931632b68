package kubeletapi

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/node/api"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/transport"
	"k8s.io/klog/v2/ktesting"
	utilexec "k8s.io/utils/exec"
	"k8s.io/utils/ptr"

	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

// waitTimeout bounds each wait of these tests.
const waitTimeout = 30 * time.Second

// The consumer pod the tests ask the kubelet API about.
const (
	consumerNamespace = "shop"
	consumerPod       = "web"
	container         = "app"
)

// env is one API server playing both clusters: the consumer that
// authenticates and authorizes kubelet API requests, and the provider whose
// pod runs on a fake kubelet. Between them, a started Server.
type env struct {
	cfg      *rest.Config
	kube     kubernetes.Interface
	ns       string // the twin namespace on the provider, also home of the test ServiceAccounts
	node     string // the virtual node the consumer pod is bound to
	remote   string // the remote pod
	addr     string // host:port of the Server
	resolver fakeResolver
}

// fakeResolver resolves the consumer pods it holds, keyed namespace/name.
type fakeResolver map[string]Target

func (r fakeResolver) Resolve(_ context.Context, namespace, pod string) (Target, error) {
	t, ok := r[namespace+"/"+pod]
	if !ok {
		return Target{}, fmt.Errorf("resolving pod %s/%s: %w", namespace, pod, ErrUnknownPod)
	}
	return t, nil
}

func newEnv(t *testing.T) *env {
	t.Helper()
	cfg := envtest.APIServer(t)
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	e := &env{cfg: cfg, kube: kube, node: "offload-provider-" + rand.String(6), remote: "web-" + rand.String(6)}
	ns, err := kube.CoreV1().Namespaces().Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "twin-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.ns = ns.Name
	nodeName := e.fakeKubelet(t)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: e.remote, Namespace: e.ns},
		Spec:       corev1.PodSpec{NodeName: nodeName, Containers: []corev1.Container{{Name: container, Image: "registry.example/app:1"}}},
	}
	if _, err := kube.CoreV1().Pods(e.ns).Create(t.Context(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	provider, providerKube := e.providerConfig(t)
	e.resolver = fakeResolver{consumerNamespace + "/" + consumerPod: {NodeName: e.node, Config: provider, Client: providerKube, Namespace: e.ns, Name: e.remote}}
	e.addr = e.start(t, Options{})
	return e
}

// providerConfig returns a provider configuration whose only credentials
// come from WrapTransport, as the peering token source does: a token of a
// ServiceAccount that may use pods and their subresources in the twin
// namespace. Its clientset can read the remote pod.
func (e *env) providerConfig(t *testing.T) (*rest.Config, kubernetes.Interface) {
	t.Helper()
	ctx := t.Context()
	sa, err := e.kube.CoreV1().ServiceAccounts(e.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "provider"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "remote-pods", Namespace: e.ns},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"pods", "pods/log", "pods/exec", "pods/attach", "pods/portforward"},
			Verbs: []string{"get", "create"},
		}},
	}
	if _, err := e.kube.RbacV1().Roles(e.ns).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.kube.RbacV1().RoleBindings(e.ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: e.ns, Name: sa.Name}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := e.kube.CoreV1().ServiceAccounts(e.ns).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(e.cfg)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper {
		return transport.NewBearerAuthRoundTripper(tr.Status.Token, rt)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, waitTimeout, "the provider credentials can read the remote pod", func(ctx context.Context) bool {
		_, err := kube.CoreV1().Pods(e.ns).Get(ctx, e.remote, metav1.GetOptions{})
		return err == nil
	})
	return cfg, kube
}

// start starts a Server with o completed by env, and returns the address
// of the kubelet API of env's virtual node.
func (e *env) start(t *testing.T, o Options) string {
	t.Helper()
	s := e.startServer(t, o)
	port, err := s.NodePort(e.node, 0)
	if err != nil {
		t.Fatal(err)
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(int(port)))
}

// startServer starts a Server with o completed by env.
func (e *env) startServer(t *testing.T, o Options) *Server {
	t.Helper()
	o.Addr, o.Resolver, o.Kube = "127.0.0.1:0", e.resolver, e.kube
	o.IPs, o.DNSNames = []net.IP{net.ParseIP("127.0.0.1")}, []string{"virtual-node.offload.test"}
	o.Logger = ktesting.NewLogger(t, ktesting.NewConfig())
	s, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("server: %v", err)
		}
	})
	return s
}

// fakeKubelet serves the kubelet API of a Node it creates, through
// virtual-kubelet's handlers, so that the provider's API server has a kubelet
// to proxy logs, exec, attach and port-forward to. It returns the node name.
//
// Logs are one line naming the container and the options received; exec
// runs "echo ARGS", "cat" (stdin to stdout) and "exit CODE"; attach writes
// "attached" and then copies stdin to stdout; port-forward writes
// "port PORT\n" and then echoes.
func (e *env) fakeKubelet(t *testing.T) string {
	t.Helper()
	mux := http.NewServeMux()
	api.AttachPodRoutes(api.PodHandlerConfig{
		GetContainerLogs: func(_ context.Context, ns, pod, c string, o api.ContainerLogOpts) (io.ReadCloser, error) {
			return io.NopCloser(strings.NewReader(fmt.Sprintf("%s/%s/%s tail=%d limitBytes=%d timestamps=%t previous=%t sinceSeconds=%d\n",
				ns, pod, c, o.Tail, o.LimitBytes, o.Timestamps, o.Previous, o.SinceSeconds))), nil
		},
		RunInContainer: func(_ context.Context, _, _, _ string, cmd []string, a api.AttachIO) error {
			switch cmd[0] {
			case "echo":
				_, err := fmt.Fprintln(a.Stdout(), strings.Join(cmd[1:], " "))
				return err
			case "cat":
				_, err := io.Copy(a.Stdout(), a.Stdin())
				return err
			case "exit":
				code, _ := strconv.Atoi(cmd[1])
				return utilexec.CodeExitError{Err: fmt.Errorf("exit status %d", code), Code: code}
			}
			return fmt.Errorf("unknown command %q", cmd[0])
		},
		AttachToContainer: func(_ context.Context, _, _, _ string, a api.AttachIO) error {
			if _, err := fmt.Fprintln(a.Stdout(), "attached"); err != nil {
				return err
			}
			_, err := io.Copy(a.Stdout(), a.Stdin())
			return err
		},
		PortForward: func(_ context.Context, _, _ string, port int32, s io.ReadWriteCloser) error {
			if _, err := fmt.Fprintf(s, "port %d\n", port); err != nil {
				return err
			}
			_, err := io.Copy(s, s)
			return err
		},
	}, mux, false)
	srv := httptest.NewUnstartedServer(mux)
	srv.TLS = &tls.Config{NextProtos: []string{"http/1.1"}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	p, _ := strconv.Atoi(port)

	ctx := t.Context()
	node, err := e.kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{GenerateName: "fake-kubelet-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.kube.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{}) })
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "127.0.0.1"}}
	node.Status.DaemonEndpoints.KubeletEndpoint.Port = int32(p) //nolint:gosec // a port number
	if _, err := e.kube.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return node.Name
}

// serviceAccount creates a ServiceAccount, grants it nodes/proxy verbs on
// the virtual node when verbs are given, and returns a token of it.
func (e *env) serviceAccount(t *testing.T, verbs ...string) string {
	t.Helper()
	return e.nodeServiceAccount(t, "proxy", verbs...)
}

// nodeServiceAccount creates a ServiceAccount, grants it verbs on
// nodes/SUBRESOURCE of the virtual node when verbs are given, and returns
// a token of it.
func (e *env) nodeServiceAccount(t *testing.T, subresource string, verbs ...string) string {
	t.Helper()
	ctx := t.Context()
	sa, err := e.kube.CoreV1().ServiceAccounts(e.ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{GenerateName: "user-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(verbs) > 0 {
		e.grant(t, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: e.ns, Name: sa.Name}, "system:serviceaccount:"+e.ns+":"+sa.Name, subresource, []string{e.node}, verbs...)
	}
	tr, err := e.kube.CoreV1().ServiceAccounts(e.ns).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// everywhereServiceAccount is serviceAccount, allowed verbs on nodes/proxy of
// every node, as the API server's kubelet client is.
func (e *env) everywhereServiceAccount(t *testing.T, verbs ...string) string {
	t.Helper()
	return e.everywhereNodeServiceAccount(t, "proxy", verbs...)
}

// everywhereNodeServiceAccount is nodeServiceAccount, allowed verbs on
// nodes/SUBRESOURCE of every node.
func (e *env) everywhereNodeServiceAccount(t *testing.T, subresource string, verbs ...string) string {
	t.Helper()
	sa, err := e.kube.CoreV1().ServiceAccounts(e.ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{GenerateName: "admin-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e.grant(t, rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: e.ns, Name: sa.Name}, "system:serviceaccount:"+e.ns+":"+sa.Name, subresource, nil, verbs...)
	tr, err := e.kube.CoreV1().ServiceAccounts(e.ns).CreateToken(t.Context(), sa.Name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To[int64](600)},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// grant binds a ClusterRole allowing verbs on nodes/SUBRESOURCE of the
// nodes names (every node when nil) to subject, and waits until the API
// server authorizes user with it.
func (e *env) grant(t *testing.T, subject rbacv1.Subject, user, subresource string, names []string, verbs ...string) {
	t.Helper()
	ctx := t.Context()
	role, err := e.kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{GenerateName: "node-proxy-"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"nodes/" + subresource}, ResourceNames: names, Verbs: verbs}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{subject},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Ask before the Server does, so that its deny cache never sees the
	// binding before RBAC has it.
	framework.Eventually(t, waitTimeout, "RBAC allows "+user, func(ctx context.Context) bool {
		sar, err := e.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User:               user,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: verbs[0], Resource: "nodes", Subresource: subresource, Name: e.node},
		}}, metav1.CreateOptions{})
		return err == nil && sar.Status.Allowed
	})
}

// restConfig returns a client configuration for the Server at addr, with
// the given bearer token.
func restConfig(addr, token string) *rest.Config {
	return &rest.Config{Host: "https://" + addr, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
}

// httpClient returns an HTTPS client for the Server that presents certs.
func httpClient(certs ...tls.Certificate) *http.Client {
	return &http.Client{Timeout: waitTimeout, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		InsecureSkipVerify: true, //nolint:gosec // the serving certificate is self-signed
		Certificates:       certs,
	}}}
}

// get sends GET https://addr+path with token (if any) through c, and
// returns the status and body.
func get(t *testing.T, c *http.Client, addr, path, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, "https://"+addr+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}
