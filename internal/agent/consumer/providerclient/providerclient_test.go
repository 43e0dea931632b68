package providerclient

import (
	"context"
	"encoding/pem"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
	"github.com/kubectl-offload/kubectl-offload/internal/scheme"
)

const ns = "offload-system"

// store writes the kubeconfig Secret of peer name with server and token,
// as the foreigncluster controller does.
func store(t *testing.T, c client.Client, name, server, caPEM, token string) {
	t.Helper()
	s, err := peering.NewKubeconfigSecret(ns, name, peering.Credentials{
		APIServerURL: server, CACert: caPEM, Token: token, TenantNamespace: "offload-tenant-consumer", ExpirationTimestamp: time.Now().Add(time.Hour),
	}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(context.Background(), s); client.IgnoreNotFound(err) != nil {
		t.Fatal(err)
	}
	if err := c.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

func TestARenewalKeepsTheCredentialsAndSwapsTheTokenInPlace(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientBuilder().WithScheme(scheme.Scheme).Build()
	s := &Set{Reader: c, Namespace: ns}
	fc := &offloadv1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: "provider", UID: "uid-1"}}

	if _, err := s.Get(ctx, fc); !errors.Is(err, ErrNoCredentials) {
		t.Fatalf("Get without a Secret = %v, want ErrNoCredentials", err)
	}

	// A client built once sends whatever token is current. Kubeconfig
	// credentials go over TLS only.
	var seen []string
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen = append(seen, r.Header.Get("Authorization"))
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	caPEM := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	store(t, c, "provider", srv.URL, caPEM, "first")
	first, err := s.Get(ctx, fc)
	if err != nil {
		t.Fatal(err)
	}
	if first.Namespace != "offload-tenant-consumer" {
		t.Errorf("tenant namespace %q", first.Namespace)
	}
	rc, err := rest.HTTPClientFor(first.Config())
	if err != nil {
		t.Fatal(err)
	}
	get := func() {
		resp, err := rc.Get(srv.URL)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	get()

	store(t, c, "provider", srv.URL, caPEM, "second")
	renewed, err := s.Get(ctx, fc)
	if err != nil {
		t.Fatal(err)
	}
	if renewed != first || renewed.Key() != first.Key() {
		t.Error("a renewal gave new Credentials; want the same ones with the new token")
	}
	get()
	if len(seen) != 2 || seen[0] != "Bearer first" || seen[1] != "Bearer second" {
		t.Errorf("the client sent %q, want the first token then the renewed one", seen)
	}

	// Another server, or another ForeignCluster of the same name, is new Credentials.
	store(t, c, "provider", "https://elsewhere.example:6443", caPEM, "second")
	moved, err := s.Get(ctx, fc)
	if err != nil {
		t.Fatal(err)
	}
	if moved == first || moved.Key() == first.Key() {
		t.Error("a new server kept the old Credentials")
	}
	again := fc.DeepCopy()
	again.UID = "uid-2"
	if other, err := s.Get(ctx, again); err != nil || other.Key() == moved.Key() {
		t.Errorf("a ForeignCluster made again kept the old Credentials (err=%v)", err)
	}
}
