package webhook

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

// waitTimeout bounds every poll of these tests.
const waitTimeout = 30 * time.Second

// certOptions are Options for a CertManager of one test: its own
// namespace, configuration name and certificate directory.
func certOptions(t *testing.T, c client.Client) Options {
	o := NewOptions()
	o.Namespace = envtest.NewNamespace(t, c, "wh-certs")
	o.ConfigurationName = "offload-webhook-" + rand.String(6)
	o.CertDir = filepath.Join(t.TempDir(), "certs")
	o.ExtraHosts = []string{"127.0.0.1"}
	return o
}

func readSecret(t *testing.T, c client.Client, o Options) *corev1.Secret {
	t.Helper()
	var s corev1.Secret
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: o.Namespace, Name: o.SecretName}, &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

// servedCert loads the pair in CertDir and checks that the CA of the
// Secret signed it for every host.
func servedCert(t *testing.T, o Options, caPEM []byte, now time.Time) *x509.Certificate {
	t.Helper()
	pair, err := tls.LoadX509KeyPair(filepath.Join(o.CertDir, "tls.crt"), filepath.Join(o.CertDir, "tls.key"))
	if err != nil {
		t.Fatalf("loading the certificate files: %v", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("the Secret's ca.crt holds no certificate")
	}
	for _, h := range o.Hosts() {
		if _, err := pair.Leaf.Verify(x509.VerifyOptions{Roots: roots, DNSName: h, CurrentTime: now}); err != nil {
			t.Errorf("the served certificate does not verify for %s: %v", h, err)
		}
	}
	return pair.Leaf
}

func TestTheCertManagerCreatesTheSecretOnceAndReusesIt(t *testing.T) {
	ctx := context.Background()
	c := envtest.NewClient(t, envtest.APIServer(t))
	o := certOptions(t, c)

	if err := NewCertManager(c, c, o).EnsureCertificate(ctx); err != nil {
		t.Fatal(err)
	}
	first := readSecret(t, c, o)
	if first.Type != corev1.SecretTypeTLS {
		t.Errorf("secret type = %q, want %q", first.Type, corev1.SecretTypeTLS)
	}
	for _, k := range []string{CACertKey, CAKeyKey, corev1.TLSCertKey, corev1.TLSPrivateKeyKey} {
		if len(first.Data[k]) == 0 {
			t.Errorf("the secret has no %s", k)
		}
	}
	servedCert(t, o, first.Data[CACertKey], time.Now())
	if info, err := os.Stat(filepath.Join(o.CertDir, "tls.key")); err != nil || info.Mode().Perm()&0o077 != 0 {
		t.Errorf("tls.key: %v, mode %v; want it readable by its owner only", err, info.Mode())
	}

	// Another replica, with its own directory, reuses the Secret.
	other := o
	other.CertDir = filepath.Join(t.TempDir(), "other")
	if err := NewCertManager(c, c, other).EnsureCertificate(ctx); err != nil {
		t.Fatal(err)
	}
	if again := readSecret(t, c, o); again.ResourceVersion != first.ResourceVersion {
		t.Errorf("a second replica rewrote the secret (resourceVersion %s, then %s)", first.ResourceVersion, again.ResourceVersion)
	}
	for _, name := range []string{"tls.crt", "tls.key"} {
		a, _ := os.ReadFile(filepath.Join(o.CertDir, name))
		b, _ := os.ReadFile(filepath.Join(other.CertDir, name))
		if !bytes.Equal(a, b) {
			t.Errorf("the replicas serve different %s", name)
		}
	}
}

func TestTheCertManagerReplacesASecretThatHoldsNoValidCertificate(t *testing.T) {
	ctx := context.Background()
	c := envtest.NewClient(t, envtest.APIServer(t))
	o := certOptions(t, c)
	broken := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: o.SecretName, Namespace: o.Namespace},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{corev1.TLSCertKey: []byte("junk"), corev1.TLSPrivateKeyKey: []byte("junk")},
	}
	if err := c.Create(ctx, broken); err != nil {
		t.Fatal(err)
	}
	if err := NewCertManager(c, c, o).EnsureCertificate(ctx); err != nil {
		t.Fatal(err)
	}
	servedCert(t, o, readSecret(t, c, o).Data[CACertKey], time.Now())
}

func TestTheCertManagerRenewsBeforeExpiry(t *testing.T) {
	ctx := context.Background()
	c := envtest.NewClient(t, envtest.APIServer(t))
	o := certOptions(t, c)
	start := time.Now()
	m := NewCertManager(c, c, o)
	if err := m.EnsureCertificate(ctx); err != nil {
		t.Fatal(err)
	}
	first := readSecret(t, c, o)
	firstLeaf := servedCert(t, o, first.Data[CACertKey], start)

	// Past two thirds of the serving certificate's year: a new one, same CA.
	m.now = func() time.Time { return start.Add(250 * 24 * time.Hour) }
	if err := m.EnsureCertificate(ctx); err != nil {
		t.Fatal(err)
	}
	renewed := readSecret(t, c, o)
	if !bytes.Equal(renewed.Data[CACertKey], first.Data[CACertKey]) {
		t.Error("renewing the serving certificate replaced the CA")
	}
	leaf := servedCert(t, o, renewed.Data[CACertKey], m.now())
	if leaf.SerialNumber.Cmp(firstLeaf.SerialNumber) == 0 {
		t.Error("the serving certificate was not renewed")
	}

	// Past two thirds of the CA's life: a new CA, the old one still in the bundle.
	m.now = func() time.Time { return start.Add(7 * 365 * 24 * time.Hour) }
	bundle, err := m.ensure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rotated := readSecret(t, c, o)
	if bytes.Equal(rotated.Data[CACertKey], first.Data[CACertKey]) {
		t.Fatal("the CA was not renewed")
	}
	if !bytes.Equal(rotated.Data[PreviousCACertKey], first.Data[CACertKey]) {
		t.Error("the previous CA was not kept")
	}
	servedCert(t, o, rotated.Data[CACertKey], m.now())
	if want := append(append([]byte{}, rotated.Data[CACertKey]...), first.Data[CACertKey]...); !bytes.Equal(bundle, want) {
		t.Error("the caBundle is not the new CA followed by the previous one")
	}

	// Once the previous CA has expired, it leaves the Secret and the bundle.
	m.now = func() time.Time { return start.Add(11 * 365 * 24 * time.Hour) }
	if bundle, err = m.ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if final := readSecret(t, c, o); len(final.Data[PreviousCACertKey]) != 0 || !bytes.Equal(bundle, final.Data[CACertKey]) {
		t.Error("the expired previous CA is still kept")
	}
}

func TestTheCertManagerSetsTheCABundleOnceTheConfigurationExists(t *testing.T) {
	c := envtest.NewClient(t, envtest.APIServer(t))
	o := certOptions(t, c)
	o.ResyncInterval = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- NewCertManager(c, c, o).Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("the CertManager stopped with %v", err)
		}
	})

	// The configuration appears after the CertManager started.
	cfg := webhookConfiguration(o.ConfigurationName, "https://127.0.0.1:1/mutate-pods", nil)
	if err := c.Create(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Delete(context.Background(), cfg) })
	framework.Eventually(t, waitTimeout, "waiting for the caBundle", func(ctx context.Context) bool {
		var got admissionregistrationv1.MutatingWebhookConfiguration
		if err := c.Get(ctx, client.ObjectKeyFromObject(cfg), &got); err != nil {
			return false
		}
		var secret corev1.Secret
		if err := c.Get(ctx, client.ObjectKey{Namespace: o.Namespace, Name: o.SecretName}, &secret); err != nil {
			return false
		}
		return bytes.Equal(got.Webhooks[0].ClientConfig.CABundle, secret.Data[CACertKey])
	})
}

// webhookConfiguration is the chart's MutatingWebhookConfiguration, with
// a URL instead of the Service and, when namespaces is set, only for
// those namespaces, so that tests sharing an API server do not meet it.
func webhookConfiguration(name, url string, namespaces []string) *admissionregistrationv1.MutatingWebhookConfiguration {
	nsSelector := &metav1.LabelSelector{MatchLabels: map[string]string{offloadv1alpha1.LabelOffloaded: "true"}}
	if namespaces != nil {
		nsSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{
			Key: corev1.LabelMetadataName, Operator: metav1.LabelSelectorOpIn, Values: namespaces,
		}}
	}
	return &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "pods.offload.io",
			AdmissionReviewVersions: []string{"v1"},
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(url)},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"},
					Scope: ptr.To(admissionregistrationv1.NamespacedScope),
				},
			}},
			FailurePolicy:      ptr.To(admissionregistrationv1.Ignore),
			MatchPolicy:        ptr.To(admissionregistrationv1.Equivalent),
			SideEffects:        ptr.To(admissionregistrationv1.SideEffectClassNone),
			TimeoutSeconds:     ptr.To[int32](5),
			ReinvocationPolicy: ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
			NamespaceSelector:  nsSelector,
			ObjectSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
				Key: "app.kubernetes.io/part-of", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"kubectl-offload"},
			}}},
		}},
	}
}
