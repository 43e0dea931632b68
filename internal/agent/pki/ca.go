// Package pki is the agent's certificate authority and the certificates it
// issues: the auth service's CA, which peers pin, and serving certificates
// renewed before they expire (the auth service, the webhook, the virtual
// nodes' kubelet API). Both sides of a peering use it; it imports neither.
//
// Why not a rotator library: cert-controller's rotator (and
// controller-runtime's certwatcher) keep a webhook's certificate in a Secret
// or on disk and rewrite the caBundle of webhook configurations when the CA
// rotates; our auth CA must never rotate (peers pin its key), and the other
// certificates live in memory only. client-go's util/cert makes
// self-signed certificates but issues no leaf from a CA, and its CA is not
// backdated for peers whose clocks lag. What a library does well here,
// reading PEM keys and certificates, comes from client-go (keyutil,
// util/cert); issuing is a few calls to crypto/x509.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

const (
	// CAValidity is how long a CA created by NewCA is valid.
	CAValidity = 10 * 365 * 24 * time.Hour
	// ServingCertValidity is how long a serving certificate issued by
	// CA.IssueServingCert is valid.
	ServingCertValidity = 365 * 24 * time.Hour
	// clockSkew backdates NotBefore so that peers whose clocks lag a little
	// accept fresh certificates.
	clockSkew = 5 * time.Minute
	// caCommonName is the subject of the auth CA.
	caCommonName = "offload-auth-ca"
)

// CA is the certificate authority of the auth service. Peers pin its public
// key (see peering.CACertHash), so it must stay the same for the life of the install.
type CA struct {
	// Cert is the parsed CA certificate.
	Cert *x509.Certificate
	// CertPEM is Cert, PEM-encoded: what goes into Secret key ca.crt.
	CertPEM []byte
	// key signs the certificates the CA issues. It never leaves the process
	// except through KeyPEM.
	key crypto.Signer
}

// NewCA creates a self-signed ECDSA P-256 CA valid for CAValidity from now.
func NewCA(now time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the CA key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: caCommonName, Organization: []string{"kubectl-offload"}},
		NotBefore:             now.Add(-clockSkew),
		NotAfter:              now.Add(CAValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("signing the CA certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing the new CA certificate: %w", err)
	}
	return &CA{Cert: cert, CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), key: key}, nil
}

// ParseCA loads a CA from its PEM certificate and PEM private key (PKCS#8,
// SEC 1 or PKCS#1). It checks that the certificate is a CA, that the key
// belongs to it and that it is valid at now.
func ParseCA(certPEM, keyPEM []byte, now time.Time) (*CA, error) {
	cert, err := parseCertPEM(certPEM)
	if err != nil {
		return nil, err
	}
	if !cert.IsCA {
		return nil, errors.New("the certificate is not a CA")
	}
	if now.After(cert.NotAfter) {
		return nil, fmt.Errorf("the CA expired at %s", cert.NotAfter.UTC().Format(time.RFC3339))
	}
	key, err := parseKeyPEM(keyPEM)
	if err != nil {
		return nil, err
	}
	pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool })
	if !ok || !pub.Equal(cert.PublicKey) {
		return nil, errors.New("the private key does not belong to the CA certificate")
	}
	return &CA{Cert: cert, CertPEM: certPEM, key: key}, nil
}

// KeyPEM returns the CA private key as PKCS#8 PEM: what goes into Secret key
// ca.key. Never log it.
func (ca *CA) KeyPEM() ([]byte, error) {
	der, err := x509.MarshalPKCS8PrivateKey(ca.key)
	if err != nil {
		return nil, fmt.Errorf("encoding the CA key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), nil
}

// IssueServingCert issues a TLS server certificate signed by the CA, valid
// for ServingCertValidity from now, with a new ECDSA P-256 key. Each entry
// of hosts that parses as an IP address becomes an IP SAN, the others DNS
// SANs; the first DNS name is also the subject's common name. The returned
// certificate carries the chain (leaf, CA) and its parsed Leaf.
func (ca *CA) IssueServingCert(hosts []string, now time.Time) (*tls.Certificate, error) {
	if len(hosts) == 0 {
		return nil, errors.New("a serving certificate needs at least one host name or IP")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating the serving key: %w", err)
	}
	serial, err := randomSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		NotBefore:    now.Add(-clockSkew),
		NotAfter:     now.Add(ServingCertValidity),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if tmpl.NotAfter.After(ca.Cert.NotAfter) {
		tmpl.NotAfter = ca.Cert.NotAfter
	}
	seen := map[string]bool{}
	for _, h := range hosts {
		if h == "" || seen[h] {
			continue
		}
		seen[h] = true
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
			continue
		}
		tmpl.DNSNames = append(tmpl.DNSNames, h)
	}
	if len(tmpl.DNSNames) > 0 {
		tmpl.Subject.CommonName = tmpl.DNSNames[0]
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.key)
	if err != nil {
		return nil, fmt.Errorf("signing the serving certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing the new serving certificate: %w", err)
	}
	return &tls.Certificate{Certificate: [][]byte{der, ca.Cert.Raw}, PrivateKey: key, Leaf: leaf}, nil
}

// parseCertPEM parses the CA certificate, the first of certPEM, with
// client-go's reader.
func parseCertPEM(certPEM []byte) (*x509.Certificate, error) {
	certs, err := certutil.ParseCertsPEM(certPEM)
	if err != nil {
		return nil, fmt.Errorf("reading the CA certificate: %w", err)
	}
	return certs[0], nil
}

// parseKeyPEM parses a private key (PKCS#8, SEC 1 or PKCS#1) with
// client-go's reader. Its errors never quote the key.
func parseKeyPEM(keyPEM []byte) (crypto.Signer, error) {
	key, err := keyutil.ParsePrivateKeyPEM(keyPEM)
	if err != nil {
		return nil, errors.New("the CA key is not a valid private key (PEM: PKCS#8, SEC 1 or PKCS#1)")
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("the CA key of type %T cannot sign", key)
	}
	return signer, nil
}

func randomSerial() (*big.Int, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("generating a serial number: %w", err)
	}
	// A serial number must be positive; [1, 2^128] always is.
	return serial.Add(serial, big.NewInt(1)), nil
}
