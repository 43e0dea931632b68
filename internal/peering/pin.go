package peering

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
)

// CACertHash returns the pin of a CA certificate, kubeadm style:
// "sha256:" followed by the hex SHA-256 of the certificate's DER
// SubjectPublicKeyInfo. It is what
// `openssl x509 -pubkey -noout | openssl pkey -pubin -outform der | sha256sum`
// prints. caCertPEM holds the certificate; only its first PEM block is read.
func CACertHash(caCertPEM []byte) (string, error) {
	block, _ := pem.Decode(caCertPEM)
	if block == nil {
		return "", errors.New("no PEM data in the CA certificate")
	}
	if block.Type != "CERTIFICATE" {
		return "", fmt.Errorf("the CA certificate PEM block is a %q, want CERTIFICATE", block.Type)
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return "", fmt.Errorf("parsing the CA certificate: %w", err)
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:]), nil
}

// PinError means the auth server's certificate chain does not match the
// pinned CA hash. The TLS handshake fails with it before any request is sent.
type PinError struct {
	// Reason says what did not match.
	Reason string
}

// Error returns the reason.
func (e *PinError) Error() string { return e.Reason }

// PinnedTLSConfig returns a client TLS configuration that trusts no system
// root: it accepts a server only when a certificate of its chain is a CA
// whose CACertHash is caCertHash and the leaf verifies against that CA
// as the only root. Host names are not checked, kubeadm style: the pin is
// the identity.
func PinnedTLSConfig(caCertHash string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The standard verification is replaced, not skipped: VerifyConnection
		// runs on every handshake, resumed ones included.
		InsecureSkipVerify: true, //nolint:gosec // see VerifyConnection
		VerifyConnection: func(cs tls.ConnectionState) error {
			return VerifyPinnedChain(cs.PeerCertificates, caCertHash)
		},
	}
}

// VerifyPinnedChain checks a server's chain, leaf first, against the pin
// caCertHash. It returns a *PinError when it does not match.
func VerifyPinnedChain(chain []*x509.Certificate, caCertHash string) error {
	if len(chain) == 0 {
		return &PinError{Reason: "the server presented no certificate"}
	}
	leaf := chain[0]
	intermediates := x509.NewCertPool()
	for _, c := range chain[1:] {
		intermediates.AddCert(c)
	}
	pinnedFound := false
	var verifyErr error
	for _, c := range chain {
		if !c.IsCA || !c.BasicConstraintsValid {
			continue
		}
		hash, err := CACertHash(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw}))
		if err != nil || hash != caCertHash {
			continue
		}
		pinnedFound = true
		roots := x509.NewCertPool()
		roots.AddCert(c)
		_, verifyErr = leaf.Verify(x509.VerifyOptions{
			Roots: roots, Intermediates: intermediates,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		})
		if verifyErr == nil {
			return nil
		}
	}
	if pinnedFound {
		return &PinError{Reason: fmt.Sprintf("the server's certificate is not signed by the pinned CA: %v", verifyErr)}
	}
	return &PinError{Reason: fmt.Sprintf("no CA in the server's certificate chain has hash %s", caCertHash)}
}
