package auth

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/pki"
)

const (
	// CASecretType is the type of the CA Secret. It is not kubernetes.io/tls
	// because that type requires tls.crt and tls.key.
	CASecretType corev1.SecretType = "offload.io/auth-ca"
	// CAKeyKey is the key of the PEM CA private key in the CA Secret.
	CAKeyKey = "ca.key"
)

// LoadOrCreateCA returns the CA stored in Secret offload-auth-ca in namespace,
// and creates that Secret with a new CA when it does not exist. created
// tells whether this call created it.
//
// The Secret is created with Create, never Update, so when several replicas
// start at once exactly one CA wins and every replica ends up with it. An
// existing Secret that does not hold a valid CA is an error, not something
// to overwrite: peers pin the CA, and replacing it silently would break
// every peering.
func LoadOrCreateCA(ctx context.Context, c client.Client, namespace string, now time.Time) (ca *pki.CA, created bool, err error) {
	key := types.NamespacedName{Namespace: namespace, Name: offloadv1alpha1.AuthCASecret}
	ca, err = getCA(ctx, c, key, now)
	if err == nil || !apierrors.IsNotFound(err) {
		return ca, false, err
	}

	ca, err = pki.NewCA(now)
	if err != nil {
		return nil, false, err
	}
	keyPEM, err := ca.KeyPEM()
	if err != nil {
		return nil, false, err
	}
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      offloadv1alpha1.AuthCASecret,
			Namespace: namespace,
			Labels: map[string]string{
				"app.kubernetes.io/name":       "offload",
				"app.kubernetes.io/part-of":    "kubectl-offload",
				"app.kubernetes.io/component":  "auth",
				"app.kubernetes.io/managed-by": "offload-agent",
			},
		},
		Type: CASecretType,
		Data: map[string][]byte{offloadv1alpha1.AuthCACertKey: ca.CertPEM, CAKeyKey: keyPEM},
	}
	err = c.Create(ctx, secret)
	switch {
	case err == nil:
		return ca, true, nil
	case apierrors.IsAlreadyExists(err):
		// Another replica won the race: use its CA.
		ca, err = getCA(ctx, c, key, now)
		return ca, false, err
	default:
		return nil, false, fmt.Errorf("creating secret %s: %w", key, err)
	}
}

// getCA reads and parses the CA Secret. A missing Secret is returned as the
// API's NotFound error, unwrapped enough for apierrors.IsNotFound.
func getCA(ctx context.Context, c client.Client, key types.NamespacedName, now time.Time) (*pki.CA, error) {
	var secret corev1.Secret
	if err := c.Get(ctx, key, &secret); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, err
		}
		return nil, fmt.Errorf("reading secret %s: %w", key, err)
	}
	ca, err := pki.ParseCA(secret.Data[offloadv1alpha1.AuthCACertKey], secret.Data[CAKeyKey], now)
	if err != nil {
		return nil, fmt.Errorf("secret %s does not hold a valid CA (%w); delete it to have a new CA created, then peer again, since peers pin the old one", key, err)
	}
	return ca, nil
}
