package kubeletapi

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/tools/remotecommand"
	"k8s.io/client-go/transport/spdy"
	utilexec "k8s.io/utils/exec"

	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

var logsPath = "/containerLogs/" + consumerNamespace + "/" + consumerPod + "/" + container

func TestAuthenticationAndAuthorization(t *testing.T) {
	e := newEnv(t)
	c := httpClient()
	denied := e.serviceAccount(t)
	allowed := e.serviceAccount(t, "get", "create")
	everywhere := e.everywhereServiceAccount(t, "get")

	tests := []struct {
		name, path, token string
		want              int
		body              string
	}{
		{name: "a request without credentials is unauthorized", path: logsPath, want: http.StatusUnauthorized},
		{name: "a request with an invalid token is unauthorized", path: logsPath, token: "not-a-token", want: http.StatusUnauthorized},
		{name: "an unknown pod is unauthorized without credentials, not not found", path: "/containerLogs/shop/nope/app", want: http.StatusUnauthorized},
		{name: "a ServiceAccount without nodes/proxy is forbidden on the pod's virtual node", path: logsPath, token: denied, want: http.StatusForbidden,
			body: "user=system:serviceaccount:" + e.ns + ":"},
		{name: "a ServiceAccount with nodes/proxy reads the logs of the remote pod", path: logsPath, token: allowed, want: http.StatusOK,
			body: e.ns + "/" + e.remote + "/" + container + " tail=0"},
		{name: "an unknown pod is not found for a user allowed nodes/proxy on every node", path: "/containerLogs/shop/nope/app", token: everywhere, want: http.StatusNotFound},
		{name: "whether a pod exists is forbidden to a user without nodes/proxy", path: "/containerLogs/shop/nope/app", token: denied, want: http.StatusForbidden},
		{name: "whether a pod exists is forbidden to a user allowed on one node only", path: "/containerLogs/shop/nope/app", token: allowed, want: http.StatusForbidden},
		{name: "a path outside the kubelet API served is not found", path: "/pods", token: allowed, want: http.StatusNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, body := get(t, c, e.addr, tt.path, tt.token)
			if code != tt.want {
				t.Fatalf("status %d, want %d: %s", code, tt.want, body)
			}
			if !strings.Contains(body, tt.body) {
				t.Errorf("body %q does not contain %q", body, tt.body)
			}
		})
	}
	t.Run("a forbidden answer names the verb and nodes/proxy, not the pod's node, and is the same for an unknown pod", func(t *testing.T) {
		_, body := get(t, c, e.addr, logsPath, denied)
		for _, want := range []string{"verb=get", "resource=nodes", "subresource=proxy"} {
			if !strings.Contains(body, want) {
				t.Errorf("body %q does not contain %q", body, want)
			}
		}
		if strings.Contains(body, e.node) {
			t.Errorf("body %q tells a forbidden user the pod's node", body)
		}
		if _, unknown := get(t, c, e.addr, "/containerLogs/shop/nope/app", denied); unknown != body {
			t.Errorf("a forbidden user tells an existing pod (%q) from an unknown one (%q)", body, unknown)
		}
	})
}

func TestLogOptionsReachTheProvider(t *testing.T) {
	e := newEnv(t)
	token := e.serviceAccount(t, "get")
	code, body := get(t, httpClient(), e.addr, logsPath+"?tailLines=7&limitBytes=4096&timestamps=true&previous=true&sinceSeconds=30", token)
	want := fmt.Sprintf("%s/%s/%s tail=7 limitBytes=4096 timestamps=true previous=true sinceSeconds=30\n", e.ns, e.remote, container)
	if code != http.StatusOK || body != want {
		t.Fatalf("got %d %q, want 200 %q", code, body, want)
	}
}

func TestClientCertificates(t *testing.T) {
	e := newEnv(t)
	t.Run("a certificate of the API server's client CA authenticates its user", func(t *testing.T) {
		// The admin user of the test API server authenticates with a client
		// certificate of the CA it publishes in extension-apiserver-authentication.
		// envtest provisions it so; the test must never pass by skipping.
		if len(e.cfg.CertData) == 0 {
			t.Fatal("the test API server's admin has no client certificate: this test needs one")
		}
		cert, err := tls.X509KeyPair(e.cfg.CertData, e.cfg.KeyData)
		if err != nil {
			t.Fatal(err)
		}
		c := httpClient(cert)
		// The client CA is loaded once the ConfigMap informer has synced.
		framework.Eventually(t, waitTimeout, "the admin certificate is accepted", func(context.Context) bool {
			code, _ := get(t, c, e.addr, logsPath, "")
			return code == http.StatusOK
		})
	})

	t.Run("the client CA ConfigMap can be another one", func(t *testing.T) {
		caPEM, certs := newClientCA(t, "alice", "bob")
		cm, err := e.kube.CoreV1().ConfigMaps(e.ns).Create(t.Context(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "client-ca"}, Data: map[string]string{ClientCAKey: string(caPEM)},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		addr := e.start(t, Options{ClientCAConfigMap: types.NamespacedName{Namespace: cm.Namespace, Name: cm.Name}})
		e.grant(t, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "alice"}, "alice", "proxy", []string{e.node}, "get")
		alice, bob := httpClient(certs[0]), httpClient(certs[1])
		// The client CA is loaded once the ConfigMap informer has synced.
		framework.Eventually(t, waitTimeout, "alice is authenticated and allowed", func(context.Context) bool {
			code, _ := get(t, alice, addr, logsPath, "")
			return code == http.StatusOK
		})
		if code, body := get(t, bob, addr, logsPath, ""); code != http.StatusForbidden || !strings.Contains(body, "user=bob") {
			t.Errorf("bob without nodes/proxy: status %d, want 403 naming bob: %s", code, body)
		}
		admin, err := tls.X509KeyPair(e.cfg.CertData, e.cfg.KeyData)
		if err != nil {
			t.Fatal(err)
		}
		if code, body := get(t, httpClient(admin), addr, logsPath, ""); code != http.StatusUnauthorized {
			t.Errorf("a certificate of another CA: status %d, want 401: %s", code, body)
		}
	})
}

func TestServingCertificate(t *testing.T) {
	e := newEnv(t)
	conn, err := tls.Dial("tcp", e.addr, &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // inspecting a self-signed certificate
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	state := conn.ConnectionState()
	leaf := state.PeerCertificates[0]
	if !slices.ContainsFunc(leaf.IPAddresses, func(ip net.IP) bool { return ip.Equal(net.ParseIP("127.0.0.1")) }) {
		t.Errorf("IP SANs %v lack 127.0.0.1", leaf.IPAddresses)
	}
	if !slices.Contains(leaf.DNSNames, "virtual-node.offload.test") {
		t.Errorf("DNS SANs %v lack virtual-node.offload.test", leaf.DNSNames)
	}
	if _, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok {
		t.Errorf("public key %T, want ECDSA", leaf.PublicKey)
	}
	if got := leaf.NotAfter.Sub(leaf.NotBefore); got < 364*24*time.Hour || got > 366*24*time.Hour {
		t.Errorf("validity %s, want a year", got)
	}
	old, err := tls.Dial("tcp", e.addr, &tls.Config{InsecureSkipVerify: true, MaxVersion: tls.VersionTLS11}) //nolint:gosec // checking TLS 1.1 is refused
	if err == nil {
		_ = old.Close()
		t.Error("a TLS 1.1 handshake succeeded")
	}
}

func TestExec(t *testing.T) {
	e := newEnv(t)
	cfg := restConfig(e.addr, e.serviceAccount(t, "create"))
	tests := []struct {
		name, query, stdin string
		wantOut            string
		wantCode           int
	}{
		{name: "a command's output comes back", query: "command=echo&command=hello&command=world&output=1", wantOut: "hello world\n"},
		{name: "stdin reaches the command", query: "command=cat&input=1&output=1", stdin: "ping", wantOut: "ping"},
		{name: "a non-zero exit code comes back", query: "command=exit&command=3&output=1", wantCode: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := url.Parse("https://" + e.addr + "/exec/" + consumerNamespace + "/" + consumerPod + "/" + container + "?" + tt.query)
			if err != nil {
				t.Fatal(err)
			}
			exec, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
			if err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			opts := remotecommand.StreamOptions{Stdout: &out}
			if tt.stdin != "" {
				opts.Stdin = strings.NewReader(tt.stdin)
			}
			ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
			defer cancel()
			err = exec.StreamWithContext(ctx, opts)
			var exitErr utilexec.ExitError
			switch {
			case tt.wantCode != 0 && (!errors.As(err, &exitErr) || exitErr.ExitStatus() != tt.wantCode):
				t.Fatalf("error %v, want exit code %d", err, tt.wantCode)
			case tt.wantCode == 0 && err != nil:
				t.Fatal(err)
			}
			if out.String() != tt.wantOut {
				t.Errorf("stdout %q, want %q", out.String(), tt.wantOut)
			}
		})
	}
	t.Run("exec needs create on nodes/proxy", func(t *testing.T) {
		u, _ := url.Parse("https://" + e.addr + "/exec/" + consumerNamespace + "/" + consumerPod + "/" + container + "?command=echo&output=1")
		exec, err := remotecommand.NewSPDYExecutor(restConfig(e.addr, e.serviceAccount(t, "get")), http.MethodPost, u)
		if err != nil {
			t.Fatal(err)
		}
		err = exec.StreamWithContext(t.Context(), remotecommand.StreamOptions{Stdout: io.Discard})
		if err == nil || !strings.Contains(err.Error(), "Forbidden") {
			t.Errorf("error %v, want a forbidden upgrade", err)
		}
	})
}

func TestAttach(t *testing.T) {
	e := newEnv(t)
	u, err := url.Parse("https://" + e.addr + "/attach/" + consumerNamespace + "/" + consumerPod + "/" + container + "?input=1&output=1")
	if err != nil {
		t.Fatal(err)
	}
	exec, err := remotecommand.NewSPDYExecutor(restConfig(e.addr, e.serviceAccount(t, "create")), http.MethodPost, u)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	if err := exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: strings.NewReader("typed"), Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	if want := "attached\ntyped"; out.String() != want {
		t.Errorf("stdout %q, want %q", out.String(), want)
	}
}

func TestPortForward(t *testing.T) {
	e := newEnv(t)
	cfg := restConfig(e.addr, e.serviceAccount(t, "create"))
	u, err := url.Parse("https://" + e.addr + "/portForward/" + consumerNamespace + "/" + consumerPod)
	if err != nil {
		t.Fatal(err)
	}
	rt, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	stop, ready := make(chan struct{}), make(chan struct{})
	var pfOut bytes.Buffer
	pf, err := portforward.NewOnAddresses(spdy.NewDialer(upgrader, &http.Client{Transport: rt}, http.MethodPost, u),
		[]string{"127.0.0.1"}, []string{"0:8080"}, stop, ready, &pfOut, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- pf.ForwardPorts() }()
	defer func() {
		close(stop)
		if err := <-done; err != nil {
			t.Errorf("port-forward: %v", err)
		}
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("port-forward: %v", err)
	case <-time.After(waitTimeout):
		t.Fatal("port-forward not ready")
	}
	ports, err := pf.GetPorts()
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 { // two connections, each its own stream pair
		conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", ports[0].Local), waitTimeout)
		if err != nil {
			t.Fatal(err)
		}
		_ = conn.SetDeadline(time.Now().Add(waitTimeout))
		msg := fmt.Sprintf("ping %d\n", i)
		if _, err := conn.Write([]byte(msg)); err != nil {
			t.Fatal(err)
		}
		_ = conn.(*net.TCPConn).CloseWrite()
		got, err := io.ReadAll(conn)
		_ = conn.Close()
		if err != nil {
			t.Fatal(err)
		}
		if want := "port 8080\n" + msg; string(got) != want {
			t.Errorf("connection %d read %q, want %q", i, got, want)
		}
	}
}

// newClientCA returns the PEM certificate of a new CA and client
// certificates it signs for users.
func newClientCA(t *testing.T, users ...string) ([]byte, []tls.Certificate) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-client-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
		KeyUsage: x509.KeyUsageCertSign, BasicConstraintsValid: true, IsCA: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	var certs []tls.Certificate
	for i, user := range users {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
			SerialNumber: big.NewInt(int64(i) + 2), Subject: pkix.Name{CommonName: user},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}, ca, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		certs = append(certs, tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key})
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), certs
}
