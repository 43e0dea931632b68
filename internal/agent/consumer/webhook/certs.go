package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/pki"
)

// Keys of the certificate Secret, a kubernetes.io/tls Secret.
const (
	// CACertKey and CAKeyKey hold the webhook CA.
	CACertKey = "ca.crt"
	CAKeyKey  = "ca.key"
	// PreviousCACertKey holds the CA that the current one replaced, kept in
	// the caBundle until it expires so that replicas still serving a
	// certificate it signed are trusted while they catch up.
	PreviousCACertKey = "previous-ca.crt"
)

// errNoConfiguration is returned while the MutatingWebhookConfiguration
// does not exist yet.
var errNoConfiguration = errors.New("the MutatingWebhookConfiguration does not exist yet")

// CertManager keeps the scheduling webhook's certificates without
// cert-manager. It stores a self-signed CA and a serving certificate for
// the webhook Service in a Secret (creating it when missing, reusing it
// while valid, renewing each once two thirds of its validity have passed),
// writes tls.crt and tls.key into the webhook server's CertDir, and puts
// the CA into the caBundle of the MutatingWebhookConfiguration. Every
// replica runs one: they share the Secret, and each serves from its files.
type CertManager struct {
	client client.Client
	reader client.Reader
	opts   Options
	now    func() time.Time
}

// NewCertManager returns a CertManager that writes with c and reads with
// r, which should be uncached: it reads one Secret and one cluster-scoped
// configuration by name.
func NewCertManager(c client.Client, r client.Reader, opts Options) *CertManager {
	return &CertManager{client: c, reader: r, opts: opts, now: time.Now}
}

// NeedLeaderElection is false: every replica serves the webhook.
func (m *CertManager) NeedLeaderElection() bool { return false }

// Start keeps the certificates and the caBundle right until ctx is done,
// retrying failures with a backoff (so the caBundle lands as soon as the
// MutatingWebhookConfiguration exists) and checking again every
// ResyncInterval once all is well.
func (m *CertManager) Start(ctx context.Context) error {
	log := m.opts.Logger
	newBackoff := func() wait.Backoff {
		return wait.Backoff{Duration: 500 * time.Millisecond, Factor: 2, Jitter: 0.1, Steps: 7, Cap: 30 * time.Second}
	}
	backoff := newBackoff()
	delay := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(delay):
		}
		err := m.Sync(ctx)
		switch {
		case err == nil:
			backoff = newBackoff()
			delay = m.opts.ResyncInterval
			continue
		case ctx.Err() != nil:
			return nil
		case errors.Is(err, errNoConfiguration):
			log.V(1).Info("Waiting for the MutatingWebhookConfiguration", "name", m.opts.ConfigurationName)
		default:
			log.Error(err, "Keeping the webhook certificates")
		}
		delay = backoff.Step()
	}
}

// Sync does one round: EnsureCertificate, then the caBundle.
func (m *CertManager) Sync(ctx context.Context) error {
	bundle, err := m.ensure(ctx)
	if err != nil {
		return err
	}
	return m.ensureCABundle(ctx, bundle)
}

// EnsureCertificate makes sure the Secret holds a valid CA and serving
// certificate, and writes the certificate into CertDir.
func (m *CertManager) EnsureCertificate(ctx context.Context) error {
	_, err := m.ensure(ctx)
	return err
}

// ensure is EnsureCertificate that returns the caBundle as well. When
// another replica writes the Secret at the same time, it reads the Secret
// again and uses what that replica wrote.
func (m *CertManager) ensure(ctx context.Context) ([]byte, error) {
	var err error
	for range 3 {
		var data map[string][]byte
		data, err = m.ensureSecret(ctx)
		if apierrors.IsAlreadyExists(err) || apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if err := m.writeFiles(data); err != nil {
			return nil, err
		}
		return caBundle(data, m.now()), nil
	}
	return nil, err
}

// ensureSecret returns the data of the certificate Secret, after renewing
// what needs it.
func (m *CertManager) ensureSecret(ctx context.Context) (map[string][]byte, error) {
	now := m.now()
	key := types.NamespacedName{Namespace: m.opts.Namespace, Name: m.opts.SecretName}
	secret := &corev1.Secret{}
	err := m.reader.Get(ctx, key, secret)
	switch {
	case apierrors.IsNotFound(err):
		secret = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace, Labels: map[string]string{
				"app.kubernetes.io/name":       "offload",
				"app.kubernetes.io/part-of":    "kubectl-offload",
				"app.kubernetes.io/component":  "webhook",
				"app.kubernetes.io/managed-by": "offload-agent",
			}},
			Type: corev1.SecretTypeTLS,
		}
	case err != nil:
		return nil, fmt.Errorf("reading secret %s: %w", key, err)
	}
	data, changed, err := m.renew(secret.Data, now)
	if err != nil || !changed {
		return data, err
	}
	secret.Data = data
	if secret.ResourceVersion == "" {
		err = m.client.Create(ctx, secret)
	} else {
		err = m.client.Update(ctx, secret)
	}
	if err != nil {
		return nil, fmt.Errorf("saving the webhook certificate in secret %s: %w", key, err)
	}
	m.opts.Logger.Info("Saved the webhook certificate", "secret", key.String())
	return data, nil
}

// renew returns the Secret data with a CA and a serving certificate that
// are valid for a while yet, and whether that differs from data. A Secret
// that holds garbage is replaced: nothing pins the webhook CA.
func (m *CertManager) renew(data map[string][]byte, now time.Time) (map[string][]byte, bool, error) {
	out := maps.Clone(data)
	if out == nil {
		out = map[string][]byte{}
	}
	ca, err := pki.ParseCA(data[CACertKey], data[CAKeyKey], now)
	if err != nil || dueForRenewal(ca.Cert, now) {
		if ca != nil {
			out[PreviousCACertKey] = ca.CertPEM
		}
		if ca, err = pki.NewCA(now); err != nil {
			return nil, false, err
		}
		keyPEM, err := ca.KeyPEM()
		if err != nil {
			return nil, false, err
		}
		out[CACertKey], out[CAKeyKey] = ca.CertPEM, keyPEM
	}
	if prev, ok := out[PreviousCACertKey]; ok && !validCert(prev, now) {
		delete(out, PreviousCACertKey)
	}
	if !m.servingCertValid(ca, out[corev1.TLSCertKey], out[corev1.TLSPrivateKeyKey], now) {
		cert, err := ca.IssueServingCert(m.opts.Hosts(), now)
		if err != nil {
			return nil, false, err
		}
		keyDER, err := x509.MarshalPKCS8PrivateKey(cert.PrivateKey)
		if err != nil {
			return nil, false, fmt.Errorf("encoding the serving key: %w", err)
		}
		out[corev1.TLSCertKey] = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Leaf.Raw})
		out[corev1.TLSPrivateKeyKey] = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	}
	changed := len(out) != len(data)
	for k, v := range out {
		changed = changed || !bytes.Equal(v, data[k])
	}
	return out, changed, nil
}

// servingCertValid tells whether certPEM and keyPEM are a pair that ca
// signed, valid for every host and not yet due for renewal.
func (m *CertManager) servingCertValid(ca *pki.CA, certPEM, keyPEM []byte, now time.Time) bool {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil || pair.Leaf == nil || dueForRenewal(pair.Leaf, now) {
		return false
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	opts := x509.VerifyOptions{Roots: roots, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	if _, err := pair.Leaf.Verify(opts); err != nil {
		return false
	}
	for _, h := range m.opts.Hosts() {
		if pair.Leaf.VerifyHostname(h) != nil {
			return false
		}
	}
	return true
}

// dueForRenewal tells whether two thirds of cert's validity have passed.
func dueForRenewal(cert *x509.Certificate, now time.Time) bool {
	life := cert.NotAfter.Sub(cert.NotBefore)
	return !now.Before(cert.NotBefore.Add(life * 2 / 3))
}

// caBundle is the current CA, followed by the previous one while it is valid.
func caBundle(data map[string][]byte, now time.Time) []byte {
	bundle := append([]byte{}, data[CACertKey]...)
	if prev := data[PreviousCACertKey]; validCert(prev, now) {
		bundle = append(bundle, prev...)
	}
	return bundle
}

// validCert tells whether certPEM is a certificate that has not expired at now.
func validCert(certPEM []byte, now time.Time) bool {
	block, _ := pem.Decode(certPEM)
	if block == nil {
		return false
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	return err == nil && now.Before(cert.NotAfter)
}

// writeFiles writes tls.crt and tls.key into CertDir when they differ, each
// through a rename so the webhook server never reads half a file.
func (m *CertManager) writeFiles(data map[string][]byte) error {
	if err := os.MkdirAll(m.opts.CertDir, 0o700); err != nil {
		return fmt.Errorf("creating the webhook certificate directory: %w", err)
	}
	// The key first: the server's certificate watcher reloads on a change
	// of either file and retries a pair that does not match.
	for _, name := range []string{corev1.TLSPrivateKeyKey, corev1.TLSCertKey} {
		path := filepath.Join(m.opts.CertDir, name)
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data[name]) {
			continue
		}
		tmp, err := os.CreateTemp(m.opts.CertDir, "."+name+"-*")
		if err != nil {
			return fmt.Errorf("writing %s: %w", path, err)
		}
		_, werr := tmp.Write(data[name])
		cerr := tmp.Close()
		if err := errors.Join(werr, cerr); err != nil {
			_ = os.Remove(tmp.Name())
			return fmt.Errorf("writing %s: %w", path, err)
		}
		if err := os.Rename(tmp.Name(), path); err != nil {
			_ = os.Remove(tmp.Name())
			return fmt.Errorf("writing %s: %w", path, err)
		}
	}
	return nil
}

// ensureCABundle sets bundle as the caBundle of every webhook of the
// MutatingWebhookConfiguration.
func (m *CertManager) ensureCABundle(ctx context.Context, bundle []byte) error {
	cfg := &admissionregistrationv1.MutatingWebhookConfiguration{}
	err := m.reader.Get(ctx, types.NamespacedName{Name: m.opts.ConfigurationName}, cfg)
	switch {
	case apierrors.IsNotFound(err):
		return errNoConfiguration
	case err != nil:
		return fmt.Errorf("reading MutatingWebhookConfiguration %s: %w", m.opts.ConfigurationName, err)
	}
	changed := false
	for i := range cfg.Webhooks {
		if !bytes.Equal(cfg.Webhooks[i].ClientConfig.CABundle, bundle) {
			cfg.Webhooks[i].ClientConfig.CABundle = bundle
			changed = true
		}
	}
	if !changed {
		return nil
	}
	if err := m.client.Update(ctx, cfg); err != nil {
		return fmt.Errorf("setting the caBundle of MutatingWebhookConfiguration %s: %w", m.opts.ConfigurationName, err)
	}
	m.opts.Logger.Info("Set the webhook caBundle", "configuration", m.opts.ConfigurationName)
	return nil
}
