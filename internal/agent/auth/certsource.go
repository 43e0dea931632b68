package auth

import (
	"crypto/tls"
	"log"
	"strings"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// certSource holds the in-memory serving certificate and reissues it from
// the CA once two thirds of its validity have passed, so a long-running
// auth pod never serves an expired certificate.
type certSource struct {
	ca    *CA
	hosts []string
	log   klog.Logger
	now   func() time.Time

	mu   sync.Mutex
	cert *tls.Certificate
}

// newCertSource issues the first certificate for hosts; now is the clock.
func newCertSource(ca *CA, hosts []string, log klog.Logger, now func() time.Time) (*certSource, error) {
	s := &certSource{ca: ca, hosts: hosts, log: log, now: now}
	cert, err := ca.IssueServingCert(hosts, s.now())
	if err != nil {
		return nil, err
	}
	s.cert = cert
	log.Info("Issued the serving certificate", "dnsNames", cert.Leaf.DNSNames, "ipAddresses", cert.Leaf.IPAddresses,
		"notAfter", cert.Leaf.NotAfter.UTC())
	return s, nil
}

// getCertificate is the tls.Config.GetCertificate callback.
func (s *certSource) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
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

// newStdLogger returns a standard library logger, for http.Server.ErrorLog,
// that writes to logger. TLS handshake errors from scanners and load
// balancer probes end up there, so callers pass a verbose logger.
func newStdLogger(logger klog.Logger) *log.Logger {
	return log.New(logWriter{logger}, "", 0)
}

type logWriter struct{ log klog.Logger }

func (w logWriter) Write(p []byte) (int, error) {
	w.log.Info(strings.TrimSpace(string(p)))
	return len(p), nil
}
