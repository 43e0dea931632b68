package auth

import (
	"crypto/x509"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/pki"
)

var testNow = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

// The auth service's certificate names every address a consumer may dial.
func TestServingCertChainsToTheCAAndCarriesEverySAN(t *testing.T) {
	ca := newTestCA(t)
	o := Options{Namespace: "offload-system", TLSSANs: []string{"auth.example.com", "192.0.2.10"}}
	cert, err := ca.IssueServingCert(o.Hosts(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	leaf := cert.Leaf
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	wantDNS := []string{"offload-auth", "offload-auth.offload-system", "offload-auth.offload-system.svc",
		"offload-auth.offload-system.svc.cluster.local", "auth.example.com", "localhost"}
	for _, name := range append(wantDNS, "192.0.2.10", "127.0.0.1", "::1") {
		_, err := leaf.Verify(x509.VerifyOptions{
			DNSName:     name,
			Roots:       roots,
			CurrentTime: testNow,
			KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		})
		if err != nil {
			t.Errorf("certificate does not verify for %s against the CA: %v", name, err)
		}
	}
	if strings.Join(leaf.DNSNames, ",") != strings.Join(wantDNS, ",") {
		t.Errorf("DNS SANs = %v, want %v", leaf.DNSNames, wantDNS)
	}
	if len(leaf.IPAddresses) != 3 || !leaf.IPAddresses[0].Equal(net.ParseIP("192.0.2.10")) {
		t.Errorf("IP SANs = %v, want 192.0.2.10, 127.0.0.1, ::1", leaf.IPAddresses)
	}
	if got := leaf.NotAfter.Sub(testNow); got != pki.ServingCertValidity {
		t.Errorf("serving certificate valid for %s, want %s", got, pki.ServingCertValidity)
	}
	if len(cert.Certificate) != 2 {
		t.Errorf("chain has %d certificates, want leaf and CA", len(cert.Certificate))
	}
	otherRoots := x509.NewCertPool()
	otherRoots.AddCert(newTestCA(t).Cert)
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "localhost", Roots: otherRoots, CurrentTime: testNow}); err == nil {
		t.Error("certificate verifies against an unrelated CA")
	}
}

func newTestCA(t *testing.T) *pki.CA {
	t.Helper()
	ca, err := pki.NewCA(testNow)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}
