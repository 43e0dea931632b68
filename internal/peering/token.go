package peering

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// A peering token is "id.secret": id is 6 and secret 16 characters of [a-z0-9].
const (
	tokenIDLength     = 6
	tokenSecretLength = 16
	tokenAlphabet     = "abcdefghijklmnopqrstuvwxyz0123456789"
)

var tokenRE = regexp.MustCompile(`^([a-z0-9]{6})\.([a-z0-9]{16})$`)

// ErrMalformedToken is returned for a token that is not of the form id.secret.
var ErrMalformedToken = errors.New("malformed peering token: want id.secret, 6 and 16 characters of a-z and 0-9, as printed by kubectl offload peer generate")

// Token is a peering token.
type Token struct {
	ID     string
	Secret string
}

// String returns the token as id.secret. It is the only form that reveals
// the secret: never log it.
func (t Token) String() string { return t.ID + "." + t.Secret }

// ParseToken parses id.secret. Its error never contains the input.
func ParseToken(s string) (Token, error) {
	m := tokenRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return Token{}, ErrMalformedToken
	}
	return Token{ID: m[1], Secret: m[2]}, nil
}

// GenerateToken returns a new random token.
func GenerateToken() (Token, error) {
	id, err := randomString(tokenIDLength)
	if err != nil {
		return Token{}, err
	}
	secret, err := randomString(tokenSecretLength)
	if err != nil {
		return Token{}, err
	}
	return Token{ID: id, Secret: secret}, nil
}

func randomString(n int) (string, error) {
	b := make([]byte, n)
	max := big.NewInt(int64(len(tokenAlphabet)))
	for i := range b {
		k, err := rand.Int(rand.Reader, max)
		if err != nil {
			return "", fmt.Errorf("reading random bytes: %w", err)
		}
		b[i] = tokenAlphabet[k.Int64()]
	}
	return string(b), nil
}

// The token Secret, in the install namespace of the provider.
const (
	// TokenSecretType is the type of token Secrets.
	TokenSecretType corev1.SecretType = "offload.io/peering-token"
	// TokenIDLabel labels a token Secret with its token ID.
	TokenIDLabel = "offload.io/token-id"
	// TokenIDKey, TokenSecretHashKey, ExpirationKey and UsageKey are the
	// data keys of a token Secret. The Secret holds the SHA-256 of the
	// token's secret, never the secret: whoever can read it cannot peer.
	// TokenSecretKey, the secret itself, is only read, from Secrets an
	// older CLI wrote.
	TokenIDKey         = "token-id"
	TokenSecretHashKey = "token-secret-sha256"
	TokenSecretKey     = "token-secret"
	ExpirationKey      = "expiration"
	UsageKey           = "usage"
	// UsedByKey records the consumer cluster ID that used a single-use
	// token, and UsedAtKey when. A token with UsedAtKey set is spent.
	UsedByKey = "used-by"
	UsedAtKey = "used-at"
	// UsageSingle and UsageReusable are the values of UsageKey.
	UsageSingle   = "single-use"
	UsageReusable = "reusable"
	// PodSecurityKey, NodePlacementKey and SameNameNamespacesKey hold the
	// ConsumerPolicy the provider chose for the consumers that peer with
	// the token: a PodSecurityLevel, then AllowedValue or nothing for each
	// of the others. A Secret without them, written by an older CLI, means
	// baseline, no node placement and no same-name namespaces.
	PodSecurityKey        = "pod-security"
	NodePlacementKey      = "node-placement"
	SameNameNamespacesKey = "same-name-namespaces"
	// NodeSelectorKey and TolerationsKey hold the policy's NodeSelector
	// and Tolerations in the forms of offloadv1alpha1.NodeSelectorString
	// and TolerationsString; absent means none.
	NodeSelectorKey = "node-selector"
	TolerationsKey  = "tolerations"
	// ConsumerKey binds the token to one consumer name: only that consumer
	// may peer with it, and it is the provider admin's consent for that
	// consumer to peer again while its tenant exists. Absent means any
	// consumer, for a first peering only.
	ConsumerKey = "consumer"
	// AllowedValue is the value of NodePlacementKey and
	// SameNameNamespacesKey that allows what they name.
	AllowedValue = "true"
)

// TokenSecretName returns the name of the Secret holding token id.
func TokenSecretName(id string) string { return "offload-peering-token-" + id }

// TokenOptions are what a token Secret records besides the token itself.
type TokenOptions struct {
	// Expires is when the token stops being valid.
	Expires time.Time
	// Reusable lets the token peer any number of consumers until it
	// expires; otherwise it can be used once.
	Reusable bool
	// Policy is what the consumers that peer with the token may do on the
	// provider; the zero value is baseline without node placement or
	// same-name namespaces.
	Policy offloadv1alpha1.ConsumerPolicy
	// Consumer, when set, is the one consumer name that may peer with the
	// token, and lets that consumer peer again while its tenant exists.
	Consumer string
}

// NewTokenSecret returns the Secret that stores tok in namespace, with the
// expiry, usage and consumer policy of o.
func NewTokenSecret(namespace string, tok Token, o TokenOptions) *corev1.Secret {
	usage := UsageSingle
	if o.Reusable {
		usage = UsageReusable
	}
	s := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{
			Name:      TokenSecretName(tok.ID),
			Namespace: namespace,
			Labels:    map[string]string{TokenIDLabel: tok.ID, "app.kubernetes.io/managed-by": "kubectl-offload"},
		},
		Type: TokenSecretType,
		Data: map[string][]byte{
			TokenIDKey:         []byte(tok.ID),
			TokenSecretHashKey: []byte(hashSecret(tok.Secret)),
			ExpirationKey:      []byte(o.Expires.UTC().Format(time.RFC3339)),
			UsageKey:           []byte(usage),
			PodSecurityKey:     []byte(o.Policy.Level()),
		},
	}
	if o.Policy.NodePlacement {
		s.Data[NodePlacementKey] = []byte(AllowedValue)
	}
	if o.Policy.SameNameNamespaces {
		s.Data[SameNameNamespacesKey] = []byte(AllowedValue)
	}
	if len(o.Policy.NodeSelector) > 0 {
		s.Data[NodeSelectorKey] = []byte(offloadv1alpha1.NodeSelectorString(o.Policy.NodeSelector))
	}
	if len(o.Policy.Tolerations) > 0 {
		s.Data[TolerationsKey] = []byte(offloadv1alpha1.TolerationsString(o.Policy.Tolerations))
	}
	if o.Consumer != "" {
		s.Data[ConsumerKey] = []byte(o.Consumer)
	}
	return s
}

// StoredToken is a token Secret as read back from the cluster.
type StoredToken struct {
	ID       string
	Expires  time.Time
	Reusable bool
	UsedBy   string
	UsedAt   time.Time
	// Policy is the consumer policy the token grants; its PodSecurity is
	// always set, baseline for a Secret that does not say.
	Policy offloadv1alpha1.ConsumerPolicy
	// Consumer is the consumer name the token is bound to; empty for any.
	Consumer string
	// secretHash is the hex SHA-256 of the token's secret.
	secretHash string
}

// hashSecret returns the hex SHA-256 of a token's secret.
func hashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

// ReadTokenSecret decodes a token Secret. A Secret without the policy keys,
// written by an older CLI, grants baseline, no node placement and no
// same-name namespaces.
func ReadTokenSecret(s *corev1.Secret) (StoredToken, error) {
	if s.Type != TokenSecretType {
		return StoredToken{}, fmt.Errorf("secret %s is of type %s, not a peering token", s.Name, s.Type)
	}
	t := StoredToken{
		ID:         string(s.Data[TokenIDKey]),
		Reusable:   string(s.Data[UsageKey]) == UsageReusable,
		UsedBy:     string(s.Data[UsedByKey]),
		Consumer:   string(s.Data[ConsumerKey]),
		secretHash: string(s.Data[TokenSecretHashKey]),
	}
	if t.secretHash == "" && len(s.Data[TokenSecretKey]) > 0 {
		t.secretHash = hashSecret(string(s.Data[TokenSecretKey])) // written by an older CLI
	}
	if err := ValidateConsumerName(t.Consumer); t.Consumer != "" && err != nil {
		return StoredToken{}, fmt.Errorf("secret %s has an invalid %s: %w: revoke the token and generate a new one with kubectl offload peer generate", s.Name, ConsumerKey, err)
	}
	exp, err := time.Parse(time.RFC3339, string(s.Data[ExpirationKey]))
	if err != nil {
		return StoredToken{}, fmt.Errorf("secret %s has no valid expiration", s.Name)
	}
	t.Expires = exp
	if v := s.Data[UsedAtKey]; len(v) > 0 {
		if t.UsedAt, err = time.Parse(time.RFC3339, string(v)); err != nil {
			return StoredToken{}, fmt.Errorf("secret %s has an invalid %s", s.Name, UsedAtKey)
		}
	}
	level, ok := offloadv1alpha1.ParsePodSecurityLevel(string(s.Data[PodSecurityKey]))
	if !ok {
		return StoredToken{}, fmt.Errorf("secret %s has an unknown %s %q, want %s: revoke the token and generate a new one with kubectl offload peer generate",
			s.Name, PodSecurityKey, s.Data[PodSecurityKey], PodSecurityLevelList())
	}
	t.Policy.PodSecurity = level
	if t.Policy.NodePlacement, err = readAllowed(s, NodePlacementKey); err != nil {
		return StoredToken{}, err
	}
	if t.Policy.SameNameNamespaces, err = readAllowed(s, SameNameNamespacesKey); err != nil {
		return StoredToken{}, err
	}
	if t.Policy.NodeSelector, err = offloadv1alpha1.ParseNodeSelector(splitList(s.Data[NodeSelectorKey])); err != nil {
		return StoredToken{}, fmt.Errorf("secret %s has an invalid %s: %w: revoke the token and generate a new one with kubectl offload peer generate", s.Name, NodeSelectorKey, err)
	}
	for _, v := range splitList(s.Data[TolerationsKey]) {
		tol, err := offloadv1alpha1.ParseToleration(v)
		if err != nil {
			return StoredToken{}, fmt.Errorf("secret %s has an invalid %s: %w: revoke the token and generate a new one with kubectl offload peer generate", s.Name, TolerationsKey, err)
		}
		t.Policy.Tolerations = append(t.Policy.Tolerations, tol)
	}
	return t, nil
}

// ValidateConsumerName checks a consumer cluster name: a DNS-1123 label
// short enough for its tenant namespace.
func ValidateConsumerName(name string) error {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("%q is not a DNS-1123 label: %s", name, errs[0])
	}
	if ns := offloadv1alpha1.TenantNamespace(name); len(ns) > validation.DNS1123LabelMaxLength {
		return fmt.Errorf("%q is too long: at most %d characters", name, validation.DNS1123LabelMaxLength-len(offloadv1alpha1.TenantNamespacePrefix))
	}
	return nil
}

// splitList splits a comma-separated Secret value; empty gives nothing.
func splitList(v []byte) []string {
	if len(v) == 0 {
		return nil
	}
	return strings.Split(string(v), ",")
}

// readAllowed reads a policy key that holds AllowedValue or nothing; "false"
// is read as nothing, anything else is an error naming the Secret.
func readAllowed(s *corev1.Secret, key string) (bool, error) {
	switch v := string(s.Data[key]); v {
	case "", "false":
		return false, nil
	case AllowedValue:
		return true, nil
	default:
		return false, fmt.Errorf("secret %s has an invalid %s %q, want %q or nothing: revoke the token and generate a new one with kubectl offload peer generate",
			s.Name, key, v, AllowedValue)
	}
}

// PodSecurityLevelList returns the Pod Security levels as "a, b or c", for
// messages.
func PodSecurityLevelList() string {
	names := make([]string, len(offloadv1alpha1.PodSecurityLevels))
	for i, l := range offloadv1alpha1.PodSecurityLevels {
		names[i] = string(l)
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// Matches compares the hash of the secret part in constant time. A stored
// token without a hash matches nothing.
func (t StoredToken) Matches(tok Token) bool {
	return t.secretHash != "" && subtle.ConstantTimeCompare([]byte(t.secretHash), []byte(hashSecret(tok.Secret))) == 1 &&
		subtle.ConstantTimeCompare([]byte(t.ID), []byte(tok.ID)) == 1
}

// Expired reports whether the token has expired at now.
func (t StoredToken) Expired(now time.Time) bool { return !now.Before(t.Expires) }

// Spent reports whether a single-use token was already used.
func (t StoredToken) Spent() bool { return !t.Reusable && !t.UsedAt.IsZero() }
