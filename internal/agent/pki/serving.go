package pki

import (
	"crypto/tls"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// ServingCert holds an in-memory serving certificate and reissues it from
// the CA once two thirds of its validity have passed, so a long-running
// server never serves an expired certificate.
type ServingCert struct {
	ca    *CA
	hosts []string
	log   klog.Logger
	now   func() time.Time

	mu   sync.Mutex
	cert *tls.Certificate
}

// NewServingCert issues the first certificate for hosts; now is the clock.
func NewServingCert(ca *CA, hosts []string, log klog.Logger, now func() time.Time) (*ServingCert, error) {
	s := &ServingCert{ca: ca, hosts: hosts, log: log, now: now}
	cert, err := ca.IssueServingCert(hosts, s.now())
	if err != nil {
		return nil, err
	}
	s.cert = cert
	log.Info("Issued the serving certificate", "dnsNames", cert.Leaf.DNSNames, "ipAddresses", cert.Leaf.IPAddresses,
		"notAfter", cert.Leaf.NotAfter.UTC())
	return s, nil
}

// GetCertificate is the tls.Config.GetCertificate callback.
func (s *ServingCert) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	leaf := s.cert.Leaf
	renewAt := leaf.NotBefore.Add(leaf.NotAfter.Sub(leaf.NotBefore) * 2 / 3)
	if now.Before(renewAt) {
		return s.cert, nil
	}
	cert, err := s.ca.IssueServingCert(s.hosts, now)
	if err != nil {
		// Keep serving the old certificate; it is still valid for a while.
		s.log.Error(err, "Renewing the serving certificate")
		return s.cert, nil
	}
	s.cert = cert
	s.log.Info("Renewed the serving certificate", "notAfter", cert.Leaf.NotAfter.UTC())
	return s.cert, nil
}
