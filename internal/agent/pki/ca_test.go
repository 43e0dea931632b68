package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"os"
	"strings"
	"testing"
	"time"

	"k8s.io/klog/v2"

	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// knownCAHash is what
// `openssl x509 -in testdata/known-ca.crt -pubkey -noout | openssl pkey -pubin -outform der | sha256sum`
// printed for the committed test certificate.
const knownCAHash = "sha256:89d1959adc14c80ba077efaadbd5a3fa349a7d1e0c2bdf48230118531e3357d5"

var testNow = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

func TestCACertHashOfAKnownCertificateMatchesOpenSSL(t *testing.T) {
	certPEM, err := os.ReadFile("testdata/known-ca.crt")
	if err != nil {
		t.Fatal(err)
	}
	got, err := peering.CACertHash(certPEM)
	if err != nil {
		t.Fatal(err)
	}
	if got != knownCAHash {
		t.Errorf("CACertHash = %s, want %s", got, knownCAHash)
	}
	if want := opensslStyleHash(t, certPEM); got != want {
		t.Errorf("CACertHash = %s, but hashing the DER public key as openssl does gives %s", got, want)
	}
}

func TestCACertHashIsStableAndIgnoresWhatFollowsTheFirstCertificate(t *testing.T) {
	ca := newTestCA(t)
	first, err := peering.CACertHash(ca.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	other := newTestCA(t)
	bundle := append(append([]byte{}, ca.CertPEM...), other.CertPEM...)
	for name, in := range map[string][]byte{"the same PEM again": ca.CertPEM, "a bundle starting with it": bundle} {
		got, err := peering.CACertHash(in)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got != first {
			t.Errorf("%s: hash %s, want %s", name, got, first)
		}
	}
	if theirs, _ := peering.CACertHash(other.CertPEM); theirs == first {
		t.Error("two different CAs have the same hash")
	}
	if want := opensslStyleHash(t, ca.CertPEM); first != want {
		t.Errorf("CACertHash = %s, want %s", first, want)
	}
}

func TestCACertHashRejectsWhatIsNotACertificate(t *testing.T) {
	keyPEM, err := newTestCA(t).KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		in   []byte
	}{
		{"empty input", nil},
		{"text without PEM", []byte("sha256:abc")},
		{"a private key", keyPEM},
		{"a CERTIFICATE block with garbage", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("junk")})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got, err := peering.CACertHash(tt.in); err == nil {
				t.Errorf("CACertHash = %s, want an error", got)
			}
		})
	}
}

func TestNewCAIsAnECDSAP256CAValidForTenYears(t *testing.T) {
	ca := newTestCA(t)
	c := ca.Cert
	if !c.IsCA || !c.BasicConstraintsValid || c.KeyUsage&x509.KeyUsageCertSign == 0 {
		t.Errorf("not a CA: IsCA=%v BasicConstraintsValid=%v KeyUsage=%v", c.IsCA, c.BasicConstraintsValid, c.KeyUsage)
	}
	pub, ok := c.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		t.Errorf("public key is %T, want ECDSA P-256", c.PublicKey)
	}
	if got := c.NotAfter.Sub(testNow); got != CAValidity || CAValidity < 10*365*24*time.Hour {
		t.Errorf("CA valid for %s after now, want %s (10 years)", got, CAValidity)
	}
	if err := c.CheckSignatureFrom(c); err != nil {
		t.Errorf("CA is not self-signed: %v", err)
	}
}

func TestParseCARoundTripsTheSecretData(t *testing.T) {
	ca := newTestCA(t)
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	got, err := ParseCA(ca.CertPEM, keyPEM, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Cert.Equal(ca.Cert) {
		t.Error("parsed certificate differs")
	}
	if _, err := got.IssueServingCert([]string{"x"}, testNow); err != nil {
		t.Errorf("parsed CA cannot issue: %v", err)
	}
}

func TestParseCARejectsBrokenCAsWithoutQuotingTheKey(t *testing.T) {
	ca, other := newTestCA(t), newTestCA(t)
	keyPEM, _ := ca.KeyPEM()
	otherKey, _ := other.KeyPEM()
	leaf, err := ca.IssueServingCert([]string{"leaf"}, testNow)
	if err != nil {
		t.Fatal(err)
	}
	leafPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Certificate[0]})
	brokenKey := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("secret-key-bytes")})
	tests := []struct {
		name            string
		cert, key       []byte
		now             time.Time
		wantErrContains string
	}{
		{"the key of another CA", ca.CertPEM, otherKey, testNow, "does not belong"},
		{"a certificate that is not a CA", leafPEM, keyPEM, testNow, "not a CA"},
		{"an expired CA", ca.CertPEM, keyPEM, testNow.Add(CAValidity + time.Hour), "expired"},
		{"a key that does not parse", ca.CertPEM, brokenKey, testNow, "not a valid private key"},
		{"no key at all", ca.CertPEM, nil, testNow, "not a valid private key"},
		{"no certificate at all", nil, keyPEM, testNow, "reading the CA certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseCA(tt.cert, tt.key, tt.now)
			if err == nil || !strings.Contains(err.Error(), tt.wantErrContains) {
				t.Fatalf("ParseCA error = %v, want one containing %q", err, tt.wantErrContains)
			}
			if strings.Contains(err.Error(), "PRIVATE KEY") || strings.Contains(err.Error(), "secret-key-bytes") {
				t.Errorf("error quotes key material: %v", err)
			}
		})
	}
}

func TestAServingCertIsRenewedAfterTwoThirdsOfItsValidity(t *testing.T) {
	ca := newTestCA(t)
	now := testNow
	s, err := NewServingCert(ca, []string{"localhost"}, klog.Logger{}, func() time.Time { return now })
	if err != nil {
		t.Fatal(err)
	}
	first, _ := s.GetCertificate(nil)
	now = testNow.Add(ServingCertValidity / 2)
	if again, _ := s.GetCertificate(nil); again != first {
		t.Error("certificate was renewed half-way through its validity")
	}
	now = testNow.Add(ServingCertValidity * 3 / 4)
	renewed, _ := s.GetCertificate(nil)
	if renewed == first || !renewed.Leaf.NotAfter.After(first.Leaf.NotAfter) {
		t.Error("certificate was not renewed three quarters through its validity")
	}
}

func newTestCA(t *testing.T) *CA {
	t.Helper()
	ca, err := NewCA(testNow)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// opensslStyleHash hashes the certificate's public key the way
// `openssl x509 -pubkey | openssl pkey -pubin -outform der | sha256sum` does:
// the DER SubjectPublicKeyInfo, re-encoded from the parsed key.
func opensslStyleHash(t *testing.T, certPEM []byte) string {
	t.Helper()
	block, _ := pem.Decode(certPEM)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(cert.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(der)
	return "sha256:" + hex.EncodeToString(sum[:])
}
