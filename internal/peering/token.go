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
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
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

// The token ConfigMap, in the install namespace of the provider. It holds
// the SHA-256 of the token's secret, never the secret: whoever can read it
// cannot peer. So it is a ConfigMap, not a Secret, and the auth service,
// which spends tokens, needs no access to the Secrets of the install
// namespace (peer kubeconfigs, gateway keys).
const (
	// TokenIDLabel labels a token ConfigMap with its token ID; only
	// ConfigMaps with it are tokens.
	TokenIDLabel = "offload.io/token-id"
	// TokenIDKey, TokenSecretHashKey, ExpirationKey and UsageKey are the
	// data keys of a token ConfigMap.
	TokenIDKey         = "token-id"
	TokenSecretHashKey = "token-secret-sha256"
	ExpirationKey      = "expiration"
	UsageKey           = "usage"
	// UsedByKey records the consumer cluster ID that used a single-use
	// token, and UsedAtKey when. A token with UsedAtKey set is spent.
	UsedByKey = "used-by"
	UsedAtKey = "used-at"
	// UsageSingle and UsageReusable are the values of UsageKey.
	UsageSingle   = "single-use"
	UsageReusable = "reusable"
	// PodSecurityKey, NodePlacementKey, SameNameNamespacesKey and
	// UnlimitedContainersKey hold the ConsumerPolicy the provider chose for
	// the consumers that peer with the token: a PodSecurityLevel, then
	// AllowedValue or nothing for each of the others.
	PodSecurityKey         = "pod-security"
	NodePlacementKey       = "node-placement"
	SameNameNamespacesKey  = "same-name-namespaces"
	UnlimitedContainersKey = "unlimited-containers"
	// NodeSelectorKey and TolerationsKey hold the policy's NodeSelector
	// and Tolerations in the forms of offloadv1alpha1.NodeSelectorString
	// and TolerationsString; absent means none.
	NodeSelectorKey = "node-selector"
	TolerationsKey  = "tolerations"
	// ExtendedResourcesKey holds the policy's ExtendedResources,
	// comma-separated and sorted; absent means none.
	ExtendedResourcesKey = "extended-resources"
	// StorageClassKey, StorageKey and StorageClaimsKey hold the policy's
	// Storage: the provider's StorageClass, the capacity lent and the most
	// claims; absent means no storage is lent.
	StorageClassKey  = "storage-class"
	StorageKey       = "storage"
	StorageClaimsKey = "storage-claims"
	// ConsumerKey binds the token to one consumer name: only that consumer
	// may peer with it, and it is the provider admin's consent for that
	// consumer to peer again while its tenant exists. Absent means any
	// consumer, for a first peering only.
	ConsumerKey = "consumer"
	// AllowedValue is the value of NodePlacementKey, SameNameNamespacesKey
	// and UnlimitedContainersKey that allows what they name.
	AllowedValue = "true"
)

// TokenConfigMapName returns the name of the ConfigMap holding token id.
func TokenConfigMapName(id string) string { return "offload-peering-token-" + id }

// TokenOptions are what a token ConfigMap records besides the token itself.
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

// NewTokenConfigMap returns the ConfigMap that stores tok in namespace,
// with the expiry, usage and consumer policy of o.
func NewTokenConfigMap(namespace string, tok Token, o TokenOptions) *corev1.ConfigMap {
	usage := UsageSingle
	if o.Reusable {
		usage = UsageReusable
	}
	c := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:      TokenConfigMapName(tok.ID),
			Namespace: namespace,
			Labels:    map[string]string{TokenIDLabel: tok.ID, "app.kubernetes.io/managed-by": "kubectl-offload"},
		},
		Data: map[string]string{
			TokenIDKey:         tok.ID,
			TokenSecretHashKey: hashSecret(tok.Secret),
			ExpirationKey:      o.Expires.UTC().Format(time.RFC3339),
			UsageKey:           usage,
			PodSecurityKey:     string(o.Policy.Level()),
		},
	}
	if o.Policy.NodePlacement {
		c.Data[NodePlacementKey] = AllowedValue
	}
	if o.Policy.SameNameNamespaces {
		c.Data[SameNameNamespacesKey] = AllowedValue
	}
	if o.Policy.UnlimitedContainers {
		c.Data[UnlimitedContainersKey] = AllowedValue
	}
	if len(o.Policy.NodeSelector) > 0 {
		c.Data[NodeSelectorKey] = offloadv1alpha1.NodeSelectorString(o.Policy.NodeSelector)
	}
	if len(o.Policy.Tolerations) > 0 {
		c.Data[TolerationsKey] = offloadv1alpha1.TolerationsString(o.Policy.Tolerations)
	}
	if len(o.Policy.ExtendedResources) > 0 {
		c.Data[ExtendedResourcesKey] = ExtendedResourcesString(o.Policy.ExtendedResources)
	}
	if st := o.Policy.Storage; st != nil {
		c.Data[StorageClassKey] = st.StorageClassName
		c.Data[StorageKey] = st.Capacity.String()
		c.Data[StorageClaimsKey] = strconv.Itoa(int(st.MaxClaims()))
	}
	if o.Consumer != "" {
		c.Data[ConsumerKey] = o.Consumer
	}
	return c
}

// StoredToken is a token ConfigMap as read back from the cluster.
type StoredToken struct {
	ID       string
	Expires  time.Time
	Reusable bool
	UsedBy   string
	UsedAt   time.Time
	// Policy is the consumer policy the token grants; its PodSecurity is
	// always set.
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

// ReadTokenConfigMap decodes a token ConfigMap.
func ReadTokenConfigMap(c *corev1.ConfigMap) (StoredToken, error) {
	if _, ok := c.Labels[TokenIDLabel]; !ok {
		return StoredToken{}, fmt.Errorf("ConfigMap %s has no label %s: it is not a peering token", c.Name, TokenIDLabel)
	}
	d := c.Data
	t := StoredToken{
		ID:         d[TokenIDKey],
		Reusable:   d[UsageKey] == UsageReusable,
		UsedBy:     d[UsedByKey],
		Consumer:   d[ConsumerKey],
		secretHash: d[TokenSecretHashKey],
	}
	invalid := func(key string, err error) error {
		return fmt.Errorf("peering token %s has an invalid %s: %w: revoke the token and generate a new one with kubectl offload peer generate", c.Name, key, err)
	}
	if err := ValidateConsumerName(t.Consumer); t.Consumer != "" && err != nil {
		return StoredToken{}, invalid(ConsumerKey, err)
	}
	exp, err := time.Parse(time.RFC3339, d[ExpirationKey])
	if err != nil {
		return StoredToken{}, fmt.Errorf("peering token %s has no valid expiration", c.Name)
	}
	t.Expires = exp
	if v := d[UsedAtKey]; v != "" {
		if t.UsedAt, err = time.Parse(time.RFC3339, v); err != nil {
			return StoredToken{}, invalid(UsedAtKey, err)
		}
	}
	level, ok := offloadv1alpha1.ParsePodSecurityLevel(d[PodSecurityKey])
	if !ok {
		return StoredToken{}, invalid(PodSecurityKey, fmt.Errorf("unknown level %q, want %s", d[PodSecurityKey], PodSecurityLevelList()))
	}
	t.Policy.PodSecurity = level
	for key, into := range map[string]*bool{NodePlacementKey: &t.Policy.NodePlacement, SameNameNamespacesKey: &t.Policy.SameNameNamespaces,
		UnlimitedContainersKey: &t.Policy.UnlimitedContainers} {
		switch v := d[key]; v {
		case "", "false":
		case AllowedValue:
			*into = true
		default:
			return StoredToken{}, invalid(key, fmt.Errorf("%q, want %q or nothing", v, AllowedValue))
		}
	}
	if t.Policy.NodeSelector, err = offloadv1alpha1.ParseNodeSelector(splitList(d[NodeSelectorKey])); err != nil {
		return StoredToken{}, invalid(NodeSelectorKey, err)
	}
	for _, v := range splitList(d[TolerationsKey]) {
		tol, err := offloadv1alpha1.ParseToleration(v)
		if err != nil {
			return StoredToken{}, invalid(TolerationsKey, err)
		}
		t.Policy.Tolerations = append(t.Policy.Tolerations, tol)
	}
	if t.Policy.ExtendedResources, err = ParseExtendedResources(splitList(d[ExtendedResourcesKey])); err != nil {
		return StoredToken{}, invalid(ExtendedResourcesKey, err)
	}
	if d[StorageClassKey] != "" || d[StorageKey] != "" {
		claims := 0
		if v := d[StorageClaimsKey]; v != "" {
			if claims, err = strconv.Atoi(v); err != nil {
				return StoredToken{}, invalid(StorageClaimsKey, err)
			}
		}
		if t.Policy.Storage, err = NewStoragePolicy(d[StorageClassKey], d[StorageKey], claims); err != nil {
			return StoredToken{}, invalid(StorageKey, err)
		}
	}
	return t, nil
}

// MaxStorageClaims is the Tenant CRD's limit on a policy's claims.
const MaxStorageClaims = 10000

// NewStoragePolicy checks and returns the storage a provider lends: its
// StorageClass class, the capacity, a quantity such as 10Gi, and the most
// claims (0 for offloadv1alpha1.DefaultStorageClaims).
func NewStoragePolicy(class, capacity string, claims int) (*offloadv1alpha1.StoragePolicy, error) {
	if class == "" {
		return nil, errors.New("no StorageClass is named")
	}
	if errs := validation.IsDNS1123Subdomain(class); len(errs) > 0 {
		return nil, fmt.Errorf("StorageClass name %q is invalid: %s", class, strings.Join(errs, "; "))
	}
	q, err := resource.ParseQuantity(capacity)
	if err != nil {
		return nil, fmt.Errorf("capacity %q is not a quantity such as 10Gi", capacity)
	}
	if q.Sign() <= 0 {
		return nil, fmt.Errorf("capacity %s lends nothing: give a positive quantity such as 10Gi", capacity)
	}
	if claims < 0 || claims > MaxStorageClaims {
		return nil, fmt.Errorf("%d claims, want 0 (for %d) to %d", claims, offloadv1alpha1.DefaultStorageClaims, MaxStorageClaims)
	}
	return &offloadv1alpha1.StoragePolicy{StorageClassName: class, Capacity: q, Claims: int32(claims)}, nil
}

// StorageString says what st lends, such as "10Gi of StorageClass
// standard in at most 100 claims", or "no storage" for nil.
func StorageString(st *offloadv1alpha1.StoragePolicy) string {
	if st == nil {
		return "no storage"
	}
	return fmt.Sprintf("%s of StorageClass %s in at most %d claims", st.Capacity.String(), st.StorageClassName, st.MaxClaims())
}

// MaxExtendedResources is the Tenant CRD's limit on the extended
// resources a policy lends.
const MaxExtendedResources = 16

// ParseExtendedResources checks names, extended resources such as
// nvidia.com/gpu, and returns them sorted without duplicates; nil for none.
func ParseExtendedResources(names []string) ([]corev1.ResourceName, error) {
	var out []corev1.ResourceName
	for _, n := range names {
		r := corev1.ResourceName(strings.TrimSpace(n))
		if err := offloadv1alpha1.ValidateExtendedResource(r); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	out = offloadv1alpha1.SortedResourceNames(out)
	if len(out) > MaxExtendedResources {
		return nil, fmt.Errorf("%d extended resources, at most %d are allowed", len(out), MaxExtendedResources)
	}
	return out, nil
}

// ExtendedResourcesString writes names comma-separated and sorted.
func ExtendedResourcesString(names []corev1.ResourceName) string {
	sorted := offloadv1alpha1.SortedResourceNames(names)
	parts := make([]string, len(sorted))
	for i, r := range sorted {
		parts[i] = string(r)
	}
	return strings.Join(parts, ",")
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

// splitList splits a comma-separated value; empty gives nothing.
func splitList(v string) []string {
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
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
