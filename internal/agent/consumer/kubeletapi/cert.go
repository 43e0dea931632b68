package kubeletapi

import (
	"crypto/tls"
	"net"
	"time"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/pki"
)

// servingCertificate returns an ECDSA P-256 serving certificate for ips and
// dnsNames, valid for a year from now, issued by a CA made for it and
// forgotten (the webhook's certificates come from the same pki.CA). The
// API server does not verify kubelet serving certificates unless it is
// given --kubelet-certificate-authority, so TLS is all that is asked of it.
func servingCertificate(ips []net.IP, dnsNames []string, now time.Time) (tls.Certificate, error) {
	ca, err := pki.NewCA(now)
	if err != nil {
		return tls.Certificate{}, err
	}
	hosts := append([]string(nil), dnsNames...)
	for _, ip := range ips {
		hosts = append(hosts, ip.String())
	}
	if len(hosts) == 0 {
		hosts = []string{"offload-kubelet-api"}
	}
	cert, err := ca.IssueServingCert(hosts, now)
	if err != nil {
		return tls.Certificate{}, err
	}
	return *cert, nil
}
