package peer

import (
	"errors"
	"net/url"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// The flags of `kubectl offload peer out-of-band`, as peer generate prints them.
const (
	AuthURLFlag   = "auth-url"
	ClusterIDFlag = "cluster-id"
	AuthTokenFlag = "auth-token"
	// AuthTokenFileFlag reads the token from a file, or "-" for the
	// standard input, instead of AuthTokenFlag.
	AuthTokenFileFlag = "auth-token-file"
	CACertHashFlag    = "ca-cert-hash"
)

// peerCommandFlags are the flags a peer command carries, in printing order.
var peerCommandFlags = []string{AuthURLFlag, ClusterIDFlag, AuthTokenFlag, CACertHashFlag}

var (
	uuidRE   = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)
	caHashRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	// shellSafeRE matches words that need no quoting in a POSIX shell.
	shellSafeRE = regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`)
)

// PeerCommandArgs are the arguments of `kubectl offload peer out-of-band`:
// what a consumer needs to peer with a provider.
type PeerCommandArgs struct {
	// Name is the provider's cluster name, a DNS-1123 label.
	Name string
	// AuthURL is the https URL of the provider's auth service.
	AuthURL string
	// ClusterID is the provider's cluster ID, a lowercase UUID.
	ClusterID string
	// AuthToken is the peering token, id.secret. Never log it.
	AuthToken string
	// CACertHash pins the auth service's CA: "sha256:" and 64 lowercase hex digits.
	CACertHash string
}

// FieldError is an invalid argument of a peer command. Its message names the
// argument and what is wrong with it, but never contains its value, which may
// be a token pasted in the wrong place.
type FieldError struct {
	// Field is the argument: "NAME" or a flag such as "--auth-token".
	Field string
	// Err says what is wrong.
	Err error
}

// Error returns "invalid FIELD: reason".
func (e *FieldError) Error() string { return "invalid " + e.Field + ": " + e.Err.Error() }

// Unwrap returns the reason.
func (e *FieldError) Unwrap() error { return e.Err }

func fieldErr(field, reason string) error {
	return &FieldError{Field: field, Err: errors.New(reason)}
}

// ValidatePeerArgs checks every argument of a peer command offline: the name
// is a DNS-1123 label, the auth URL is https, the cluster ID a UUID, the token
// well formed and the CA hash "sha256:" and 64 hex digits. The error is a
// *FieldError for the first bad argument and never contains a value.
func ValidatePeerArgs(a PeerCommandArgs) error {
	if a.Name == "" {
		return fieldErr("NAME", "the provider's cluster name is missing")
	}
	if len(validation.IsDNS1123Label(a.Name)) > 0 {
		return fieldErr("NAME", "want a DNS-1123 label: at most 63 characters of a-z, 0-9 and '-', starting and ending with a letter or digit")
	}
	if err := validateAuthURL(a.AuthURL); err != nil {
		return &FieldError{Field: "--" + AuthURLFlag, Err: err}
	}
	if !uuidRE.MatchString(a.ClusterID) {
		return fieldErr("--"+ClusterIDFlag, "want the provider's cluster ID, a lowercase UUID such as 123e4567-e89b-12d3-a456-426614174000")
	}
	if tok, err := peering.ParseToken(a.AuthToken); err != nil || tok.String() != a.AuthToken {
		return &FieldError{Field: "--" + AuthTokenFlag, Err: peering.ErrMalformedToken}
	}
	if !caHashRE.MatchString(a.CACertHash) {
		return fieldErr("--"+CACertHashFlag, "want sha256: followed by 64 lowercase hex digits, as printed by kubectl offload peer generate")
	}
	return nil
}

// validateAuthURL accepts an absolute https URL with a host, and no user
// info, query or fragment: the agent appends the endpoint paths to it.
func validateAuthURL(s string) error {
	if s == "" {
		return errors.New("the provider's auth URL is missing")
	}
	u, err := url.Parse(s)
	if err != nil || !strings.HasPrefix(s, "https://") || u.Hostname() == "" {
		return errors.New("want an https URL such as https://203.0.113.7:31443")
	}
	if u.User != nil || u.RawQuery != "" || u.Fragment != "" || strings.ContainsAny(s, "?# \t\r\n") {
		return errors.New("want an https URL without user info, query or fragment")
	}
	return nil
}

// Command returns the canonical command line for a: what peer generate
// prints, quoted so that a POSIX shell reads back exactly a.
func (a PeerCommandArgs) Command() string {
	words := []string{"kubectl", "offload", "peer", "out-of-band", a.Name}
	for _, f := range peerCommandFlags {
		words = append(words, "--"+f, a.flag(f))
	}
	for i, w := range words {
		words[i] = shellQuote(w)
	}
	return strings.Join(words, " ")
}

// flag returns the value of flag f.
func (a PeerCommandArgs) flag(f string) string {
	switch f {
	case AuthURLFlag:
		return a.AuthURL
	case ClusterIDFlag:
		return a.ClusterID
	case AuthTokenFlag:
		return a.AuthToken
	case CACertHashFlag:
		return a.CACertHash
	}
	return ""
}

// shellQuote quotes w for a POSIX shell when it needs it.
func shellQuote(w string) string {
	if shellSafeRE.MatchString(w) {
		return w
	}
	return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
}
