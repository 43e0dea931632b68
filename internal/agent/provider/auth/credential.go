package auth

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"k8s.io/apiserver/pkg/authentication/serviceaccount"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

const (
	// keysMaxAge is how long the API server's signing keys are used before
	// they are read again.
	keysMaxAge = 10 * time.Minute
	// keysMinInterval is the least time between two reads of the keys, so
	// that tokens naming unknown keys cannot make the service hammer the
	// API server.
	keysMinInterval = 30 * time.Second
)

// signatureAlgorithms are those the API server signs ServiceAccount tokens
// with (RSA or ECDSA keys).
var signatureAlgorithms = []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.ES256, jose.ES384, jose.ES512}

// credentials tells, without asking the API server, a consumer's credential
// (a ServiceAccount token this cluster's API server signed for the
// ServiceAccount offload-consumer of a tenant namespace, not expired) from
// anything else: it checks the signature with the keys the API server
// publishes for service account issuer discovery (/openid/v1/jwks). The
// limiter keys such requests on the tenant, not on their address: a flood of
// bad requests from an address a consumer shares (a NAT, a node) does not
// stop that consumer's refreshes. Revocation is still the TokenReview's to
// judge; a verified signature only says whose bucket a request spends.
type credentials struct {
	// fetch reads the API server's JSON Web Key Set.
	fetch func(context.Context) ([]byte, error)
	now   func() time.Time

	mu      sync.Mutex
	keys    jose.JSONWebKeySet
	fetched time.Time // zero until the first read
}

func newCredentials(fetch func(context.Context) ([]byte, error)) *credentials {
	return &credentials{fetch: fetch, now: time.Now}
}

// tenant returns the ServiceAccount user name of token when it is a
// consumer's credential, "" otherwise.
func (c *credentials) tenant(ctx context.Context, token string) string {
	if c == nil || strings.Count(token, ".") != 2 {
		return ""
	}
	tok, err := jwt.ParseSigned(token, signatureAlgorithms)
	if err != nil || len(tok.Headers) != 1 {
		return ""
	}
	for _, key := range c.keysFor(ctx, tok.Headers[0].KeyID) {
		var claims jwt.Claims
		if err := tok.Claims(key.Key, &claims); err != nil {
			continue
		}
		if claims.Expiry == nil || !claims.Expiry.Time().After(c.now()) {
			return ""
		}
		ns, name, err := serviceaccount.SplitUsername(claims.Subject)
		if err != nil || !strings.HasPrefix(ns, offloadv1alpha1.TenantNamespacePrefix) || name != offloadv1alpha1.ConsumerServiceAccount {
			return ""
		}
		return claims.Subject
	}
	return ""
}

// keysFor returns the keys of id, reading the key set again when it is
// old, or does not have id and was not read in the last keysMinInterval.
func (c *credentials) keysFor(ctx context.Context, id string) []jose.JSONWebKey {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.now()
	keys := c.keys.Key(id)
	stale := c.fetched.IsZero() || now.Sub(c.fetched) > keysMaxAge
	if stale || (len(keys) == 0 && now.Sub(c.fetched) > keysMinInterval) {
		c.fetched = now
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if b, err := c.fetch(ctx); err == nil {
			var set jose.JSONWebKeySet
			if json.Unmarshal(b, &set) == nil {
				c.keys = set
				keys = c.keys.Key(id)
			}
		}
	}
	return keys
}
