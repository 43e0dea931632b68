package auth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2/ktesting"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/pki"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
	"github.com/kubectl-offload/kubectl-offload/test/framework/netlab"
)

// runningServer is an auth Server started in-process by startServer.
type runningServer struct {
	https, health string // host:port
	stop          func() error
}

func TestAuthServerCreatesTheCAOnceAndASecondInstanceReusesIt(t *testing.T) {
	c := envtest.NewClient(t, envtest.APIServer(t))
	ns := envtest.NewNamespace(t, c, "auth")

	first := startServer(t, c, ns)
	secret := getCASecret(t, c, ns)
	if secret.Type != CASecretType || len(secret.Data[offloadv1alpha1.AuthCACertKey]) == 0 || len(secret.Data[CAKeyKey]) == 0 {
		t.Fatalf("CA secret has type %q and keys %v, want %s with %s and %s", secret.Type, keys(secret.Data), CASecretType, offloadv1alpha1.AuthCACertKey, CAKeyKey)
	}
	caPEM := secret.Data[offloadv1alpha1.AuthCACertKey]

	second := startServer(t, c, ns)
	if again := getCASecret(t, c, ns); again.ResourceVersion != secret.ResourceVersion {
		t.Errorf("the second instance changed the CA secret (resourceVersion %s -> %s)", secret.ResourceVersion, again.ResourceVersion)
	}

	trusting := clientTrusting(t, caPEM, "")
	for name, s := range map[string]runningServer{"first": first, "second": second} {
		resp := get(t, trusting, "https://"+s.https+"/healthz")
		if resp.status != http.StatusOK || resp.body != "ok" {
			t.Errorf("%s instance: GET /healthz = %d %q, want 200 ok", name, resp.status, resp.body)
		}
	}
	viaService := clientTrusting(t, caPEM, "offload-auth."+ns+".svc")
	if resp := get(t, viaService, "https://"+first.https+"/healthz"); resp.status != http.StatusOK {
		t.Errorf("GET /healthz as offload-auth.%s.svc = %d, want 200", ns, resp.status)
	}

	for name, s := range map[string]runningServer{"first": first, "second": second} {
		if err := s.stop(); err != nil {
			t.Errorf("%s instance: Run returned %v after cancellation, want nil", name, err)
		}
	}
}

func TestAuthServerAnswersUnknownPathsWithAJSONNotFound(t *testing.T) {
	c := envtest.NewClient(t, envtest.APIServer(t))
	ns := envtest.NewNamespace(t, c, "auth")
	s := startServer(t, c, ns)
	client := clientTrusting(t, getCASecret(t, c, ns).Data[offloadv1alpha1.AuthCACertKey], "")

	resp, err := client.Post("https://"+s.https+"/v1/nope", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusNotFound || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("POST /v1/nope = %d %s, want 404 application/json", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	got := decodeBody(t, string(body))
	if len(got) != 2 || got["reason"] != peering.ReasonNotFound || !strings.Contains(got["message"], "/v1/nope") {
		t.Errorf("body %s, want {\"reason\":\"NotFound\",\"message\":\"... /v1/nope\"}", body)
	}
}

func TestAuthServerRefusesClientsThatDoNotTrustItsCA(t *testing.T) {
	c := envtest.NewClient(t, envtest.APIServer(t))
	ns := envtest.NewNamespace(t, c, "auth")
	s := startServer(t, c, ns)
	caPEM := getCASecret(t, c, ns).Data[offloadv1alpha1.AuthCACertKey]

	unrelated, err := pki.NewCA(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := clientTrusting(t, unrelated.CertPEM, "").Get("https://" + s.https + "/healthz"); err == nil {
		t.Error("a client trusting another CA connected")
	}
	old := clientTrusting(t, caPEM, "")
	old.Transport.(*http.Transport).TLSClientConfig.MaxVersion = tls.VersionTLS11
	if _, err := old.Get("https://" + s.https + "/healthz"); err == nil {
		t.Error("a TLS 1.1 client connected; the minimum is TLS 1.2")
	}
}

func TestReplicasRacingToCreateTheCAEndUpWithTheSameOne(t *testing.T) {
	c := envtest.NewClient(t, envtest.APIServer(t))
	ns := envtest.NewNamespace(t, c, "auth")
	const replicas = 5
	var (
		wg      sync.WaitGroup
		certs   [replicas]string
		created [replicas]bool
		errs    [replicas]error
	)
	for i := range replicas {
		wg.Go(func() {
			var ca *pki.CA
			ca, created[i], errs[i] = LoadOrCreateCA(context.Background(), c, ns, time.Now())
			if ca != nil {
				certs[i] = string(ca.CertPEM)
			}
		})
	}
	wg.Wait()
	creators := 0
	for i := range replicas {
		if errs[i] != nil {
			t.Fatalf("replica %d: %v", i, errs[i])
		}
		if certs[i] != certs[0] {
			t.Errorf("replica %d got another CA than replica 0", i)
		}
		if created[i] {
			creators++
		}
	}
	if creators != 1 {
		t.Errorf("%d replicas report creating the CA, want exactly 1", creators)
	}
	if stored := string(getCASecret(t, c, ns).Data[offloadv1alpha1.AuthCACertKey]); stored != certs[0] {
		t.Error("the replicas use another CA than the stored one")
	}
}

func TestAnInvalidCASecretIsReportedAndLeftAlone(t *testing.T) {
	c := envtest.NewClient(t, envtest.APIServer(t))
	ns := envtest.NewNamespace(t, c, "auth")
	bad := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.AuthCASecret, Namespace: ns},
		Type:       CASecretType,
		Data:       map[string][]byte{offloadv1alpha1.AuthCACertKey: []byte("not a certificate"), CAKeyKey: []byte("not a key")},
	}
	if err := c.Create(context.Background(), bad); err != nil {
		t.Fatal(err)
	}
	_, _, err := LoadOrCreateCA(context.Background(), c, ns, time.Now())
	if err == nil || !strings.Contains(err.Error(), "delete it") {
		t.Fatalf("error %v, want one that says to delete the secret", err)
	}
	if got := getCASecret(t, c, ns); string(got.Data[offloadv1alpha1.AuthCACertKey]) != "not a certificate" {
		t.Error("the invalid secret was overwritten")
	}
}

func TestReadyzFailsUntilTheHTTPSServerServes(t *testing.T) {
	s, err := NewServer(nopClient(), Options{Namespace: "ns", Listen: ":0", HealthProbeBindAddress: ":0"})
	if err != nil {
		t.Fatal(err)
	}
	h := s.healthHandler()
	for _, tt := range []struct {
		ready      bool
		path       string
		wantStatus int
	}{
		{false, "/healthz", http.StatusOK},
		{false, "/readyz", http.StatusServiceUnavailable},
		{true, "/readyz", http.StatusOK},
	} {
		s.ready.Store(tt.ready)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, tt.path, nil))
		if rec.Code != tt.wantStatus {
			t.Errorf("ready=%v: GET %s = %d, want %d", tt.ready, tt.path, rec.Code, tt.wantStatus)
		}
	}
}

// startServer runs an auth Server for namespace on free loopback ports and
// returns once /readyz on its health port answers 200. The server is
// stopped at the end of the test unless the test stops it first.
func startServer(t *testing.T, c client.Client, namespace string) runningServer {
	t.Helper()
	return startServerWith(t, c, namespace, nil)
}

// startServerWith is startServer with setup, when not nil, called on the
// Server before Run.
func startServerWith(t *testing.T, c client.Client, namespace string, setup func(*Server)) runningServer {
	t.Helper()
	ports := make([]int, 2)
	for i := range ports {
		p, err := netlab.FreePort()
		if err != nil {
			t.Fatal(err)
		}
		ports[i] = p
	}
	o := NewOptions()
	o.Namespace = namespace
	o.Listen = fmt.Sprintf("127.0.0.1:%d", ports[0])
	o.HealthProbeBindAddress = fmt.Sprintf("127.0.0.1:%d", ports[1])
	o.Logger = ktesting.NewLogger(t, ktesting.NewConfig())
	srv, err := NewServer(c, o)
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(srv)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	var once sync.Once
	var runErr error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case runErr = <-done:
			case <-time.After(30 * time.Second):
				runErr = errors.New("run did not return within 30s of cancellation")
			}
		})
		return runErr
	}
	t.Cleanup(func() { _ = stop() })

	s := runningServer{https: o.Listen, health: o.HealthProbeBindAddress, stop: stop}
	plain := &http.Client{Timeout: 5 * time.Second}
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		select {
		case err := <-done:
			return false, fmt.Errorf("run returned early: %v", err)
		default:
		}
		resp, err := plain.Get("http://" + s.health + "/readyz")
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		t.Fatalf("waiting for /readyz on %s: %v", s.health, err)
	}
	return s
}

func getCASecret(t *testing.T, c client.Client, namespace string) *corev1.Secret {
	t.Helper()
	var s corev1.Secret
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: namespace, Name: offloadv1alpha1.AuthCASecret}, &s); err != nil {
		t.Fatalf("reading the CA secret: %v", err)
	}
	return &s
}

// clientTrusting returns an HTTPS client whose only root is caPEM. A
// non-empty serverName is verified instead of the URL's host.
func clientTrusting(t *testing.T, caPEM []byte, serverName string) *http.Client {
	t.Helper()
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.crt holds no certificate")
	}
	return &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: serverName}},
	}
}

type response struct {
	status int
	body   string
}

func get(t *testing.T, c *http.Client, url string) response {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return response{status: resp.StatusCode, body: string(b)}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
