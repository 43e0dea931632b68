package peering

import (
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// The Secrets a consumer keeps for a peer, in the install namespace, and
// their keys. The CLI writes the token Secret; the agent exchanges the token
// for credentials, writes the kubeconfig Secret and deletes the token Secret.
const (
	// PeerAuthTokenSecretType is the type of the Secret holding the token
	// the consumer was given by peer generate.
	PeerAuthTokenSecretType corev1.SecretType = "offload.io/peer-auth-token"
	// PeerKubeconfigSecretType is the type of the Secret holding the
	// consumer's credentials on the provider.
	PeerKubeconfigSecretType corev1.SecretType = "offload.io/peer-kubeconfig"
	// PeerTokenKey holds the token, id.secret, in a token Secret.
	PeerTokenKey = "token"
	// PeerKubeconfigKey holds the kubeconfig in a kubeconfig Secret.
	PeerKubeconfigKey = "kubeconfig"
	// PeerExpirationKey holds when the kubeconfig's token expires, RFC 3339.
	PeerExpirationKey = "expiration"
	// PeerIssuedKey holds when the kubeconfig's token was issued, RFC 3339.
	PeerIssuedKey = "issued"
	// ForeignClusterLabel names the ForeignCluster a Secret belongs to.
	ForeignClusterLabel = "offload.io/foreign-cluster"
	// TokenIDAnnotation on a ForeignCluster is the ID (never the secret) of
	// the token the CLI last stored for it; changing it makes the agent try
	// the new token at once.
	TokenIDAnnotation = "offload.io/peer-token-id"
	// ObservedTokenIDAnnotation on a ForeignCluster is the TokenIDAnnotation
	// an agent of an earlier release last acted on; the agent now records
	// it in status.observedTokenID, with the status that answers that
	// token, and the CLI trusts the conditions only once it matches the
	// token it stored.
	ObservedTokenIDAnnotation = "offload.io/observed-peer-token-id"
)

// PeerTokenSecretName returns the name of the token Secret for peer name.
func PeerTokenSecretName(name string) string { return "offload-peer-" + name + "-token" }

// PeerKubeconfigSecretName returns the name of the kubeconfig Secret for peer name.
func PeerKubeconfigSecretName(name string) string { return "offload-peer-" + name + "-kubeconfig" }

// NewPeerTokenSecret returns the token Secret for peer name in namespace,
// holding token (id.secret). The CLI writes it; PeerToken reads it.
func NewPeerTokenSecret(namespace, name, token string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: PeerTokenSecretName(name), Namespace: namespace, Labels: map[string]string{ForeignClusterLabel: name}},
		Type:       PeerAuthTokenSecretType,
		Data:       map[string][]byte{PeerTokenKey: []byte(token)},
	}
}

// PeerToken returns the token a token Secret holds, or "" when s is nil or
// holds none.
func PeerToken(s *corev1.Secret) string {
	if s == nil {
		return ""
	}
	return string(s.Data[PeerTokenKey])
}

// NewKubeconfigSecret returns the kubeconfig Secret for peer name in
// namespace: a kubeconfig whose context's namespace is the tenant
// namespace, and when creds expire and were issued. The agent writes it;
// TenantConfig and CredentialTimes read it.
func NewKubeconfigSecret(namespace, name string, creds Credentials, issued time.Time) (*corev1.Secret, error) {
	if err := creds.CheckSecure(); err != nil {
		return nil, err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[name] = &clientcmdapi.Cluster{Server: creds.APIServerURL, CertificateAuthorityData: []byte(creds.CACert)}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: creds.Token}
	cfg.Contexts[name] = &clientcmdapi.Context{Cluster: name, AuthInfo: name, Namespace: creds.TenantNamespace}
	cfg.CurrentContext = name
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, fmt.Errorf("writing the kubeconfig: %w", err)
	}
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name: PeerKubeconfigSecretName(name), Namespace: namespace,
			Labels: map[string]string{ForeignClusterLabel: name},
		},
		Type: PeerKubeconfigSecretType,
		Data: map[string][]byte{
			PeerKubeconfigKey: data,
			PeerExpirationKey: []byte(creds.ExpirationTimestamp.UTC().Format(time.RFC3339)),
			PeerIssuedKey:     []byte(issued.UTC().Format(time.RFC3339)),
		},
	}, nil
}

// CredentialTimes returns when the credentials of a kubeconfig Secret
// expire and when they were issued (the Secret's creation when not recorded).
func CredentialTimes(s *corev1.Secret) (expiry, issued time.Time, err error) {
	expiry, err = time.Parse(time.RFC3339, string(s.Data[PeerExpirationKey]))
	if err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("secret %s has no valid %q: %w", s.Name, PeerExpirationKey, err)
	}
	issued, err = time.Parse(time.RFC3339, string(s.Data[PeerIssuedKey]))
	if err != nil || issued.After(expiry) {
		issued = s.CreationTimestamp.Time
	}
	return expiry, issued, nil
}

// BearerToken returns the token of the kubeconfig in kubeconfig Secret s.
func BearerToken(s *corev1.Secret) (string, error) {
	cfg, err := clientcmd.Load(s.Data[PeerKubeconfigKey])
	if err != nil {
		return "", fmt.Errorf("reading Secret %s: %w", s.Name, err)
	}
	for _, a := range cfg.AuthInfos {
		if a.Token != "" {
			return a.Token, nil
		}
	}
	return "", fmt.Errorf("secret %s holds no token", s.Name)
}

// ErrInsecureCredentials is wrapped by the errors of credentials whose API
// server would get the token in clear or unverified.
var ErrInsecureCredentials = errors.New("the provider's API server is not reached over verified https")

// IsHTTPSURL reports whether s is an https URL with a host: an API server
// URL credentials may be sent to. Install, the auth service and the
// consumer's agent all hold the advertised URL to it.
func IsHTTPSURL(s string) bool {
	u, err := url.Parse(s)
	return err == nil && u.Scheme == "https" && u.Host != ""
}

// CheckSecure checks that the credentials' API server URL is https and
// that they come with a CA bundle to verify it: the token must never travel
// in clear, nor to a server nobody checked.
func (c Credentials) CheckSecure() error {
	if !IsHTTPSURL(c.APIServerURL) {
		return fmt.Errorf("%w: the advertised API server URL %q is not https://HOST[:PORT]; the provider must install with --api-server-url https://HOST:PORT",
			ErrInsecureCredentials, c.APIServerURL)
	}
	if block, _ := pem.Decode([]byte(c.CACert)); block == nil || block.Type != "CERTIFICATE" {
		return fmt.Errorf("%w: the provider sent no CA certificate for its API server %s", ErrInsecureCredentials, c.APIServerURL)
	}
	return nil
}
