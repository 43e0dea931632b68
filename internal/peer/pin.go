package peer

import (
	"crypto/sha256"
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
