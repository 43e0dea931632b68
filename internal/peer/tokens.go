package peer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"

	"github.com/kubectl-offload/kubectl-offload/internal/cli/factory"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/output"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// The statuses of a token in peer tokens list.
const (
	TokenValid   = "valid"
	TokenExpired = "expired"
	TokenUsed    = "used"
)

// ErrTokenNotFound is wrapped by revoke's error for IDs without a stored token.
var ErrTokenNotFound = errors.New("peering token not found")

var tokenIDRE = regexp.MustCompile(`^[a-z0-9]{6}$`)

var tokenListType = metav1.TypeMeta{APIVersion: "offload.io/v1alpha1", Kind: "PeerTokenList"}

// TokenList is the result of peer tokens list. It never holds a secret.
type TokenList struct {
	metav1.TypeMeta `json:",inline"`
	Items           []TokenInfo `json:"items"`
}

// TokenInfo describes one peering token without its secret.
type TokenInfo struct {
	// ID is the public part of the token.
	ID string `json:"id"`
	// ExpiresAt is when the token expires.
	ExpiresAt time.Time `json:"expiresAt"`
	// Usage is single-use or reusable.
	Usage string `json:"usage"`
	// Status is valid, expired or used.
	Status string `json:"status"`
	// UsedBy is the cluster ID of the consumer that used the token, if any.
	UsedBy string `json:"usedBy,omitempty"`
	// UsedAt is when the token was used, if it was.
	UsedAt *time.Time `json:"usedAt,omitempty"`
	// Consumer is the one consumer name the token peers, when bound.
	Consumer string `json:"consumer,omitempty"`
}

// tokenInfo describes t at now.
func tokenInfo(t peering.StoredToken, now time.Time) TokenInfo {
	info := TokenInfo{ID: t.ID, ExpiresAt: t.Expires, Usage: peering.UsageSingle, Status: TokenValid, UsedBy: t.UsedBy, Consumer: t.Consumer}
	if t.Reusable {
		info.Usage = peering.UsageReusable
	}
	if !t.UsedAt.IsZero() {
		at := t.UsedAt
		info.UsedAt = &at
	}
	switch {
	case t.Spent():
		info.Status = TokenUsed
	case t.Expired(now):
		info.Status = TokenExpired
	}
	return info
}

// table renders the list like kubectl get.
func (l TokenList) table(w io.Writer) error {
	if len(l.Items) == 0 {
		_, err := fmt.Fprintln(w, "No peering tokens. Create one with kubectl offload peer generate.")
		return err
	}
	table := output.Columns{Header: []string{"ID", "EXPIRES", "USAGE", "CONSUMER", "STATUS", "USED BY"}}
	orDash := func(s string) string {
		if s == "" {
			return "-"
		}
		return s
	}
	for _, t := range l.Items {
		table.Rows = append(table.Rows, []string{t.ID, t.ExpiresAt.Format(time.RFC3339), t.Usage, orDash(t.Consumer), t.Status, orDash(t.UsedBy)})
	}
	return table.Write(w)
}

// TokensListOptions are the options of `kubectl offload peer tokens list`.
type TokensListOptions struct {
	genericiooptions.IOStreams
	Output output.Format

	namespace string
	kube      kubernetes.Interface
	now       func() time.Time
}

// NewTokensListOptions returns TokensListOptions with defaults.
func NewTokensListOptions(streams genericiooptions.IOStreams) *TokensListOptions {
	return &TokensListOptions{IOStreams: streams, Output: output.Table, now: time.Now}
}

// Complete builds the client from the factory.
func (o *TokensListOptions) Complete(f factory.Factory) error {
	o.namespace = f.Namespace()
	kube, err := f.KubeClient()
	o.kube = kube
	return err
}

// Validate checks the options.
func (o *TokensListOptions) Validate() error { return o.Output.Validate() }

// Run lists the peering tokens of the install namespace, oldest expiry first.
func (o *TokensListOptions) Run(ctx context.Context) error {
	list, err := o.kube.CoreV1().ConfigMaps(o.namespace).List(ctx, metav1.ListOptions{LabelSelector: peering.TokenIDLabel})
	if err != nil {
		return fmt.Errorf("listing the peering tokens in namespace %s: %w", o.namespace, err)
	}
	now := o.now()
	out := TokenList{TypeMeta: tokenListType, Items: []TokenInfo{}}
	for i := range list.Items {
		t, err := peering.ReadTokenConfigMap(&list.Items[i])
		if err != nil {
			output.NewSteps(o.ErrOut).Warn("skipping %v", err)
			continue
		}
		out.Items = append(out.Items, tokenInfo(t, now))
	}
	sort.Slice(out.Items, func(i, j int) bool {
		a, b := out.Items[i], out.Items[j]
		if !a.ExpiresAt.Equal(b.ExpiresAt) {
			return a.ExpiresAt.Before(b.ExpiresAt)
		}
		return a.ID < b.ID
	})
	return output.Write(o.Out, o.Output, out, out.table)
}

// TokensRevokeOptions are the options of `kubectl offload peer tokens revoke`.
type TokensRevokeOptions struct {
	genericiooptions.IOStreams
	// IDs are the token IDs to revoke.
	IDs []string
	// IgnoreNotFound treats an ID without a token as already revoked.
	IgnoreNotFound bool

	namespace string
	kube      kubernetes.Interface
}

// NewTokensRevokeOptions returns TokensRevokeOptions with defaults.
func NewTokensRevokeOptions(streams genericiooptions.IOStreams) *TokensRevokeOptions {
	return &TokensRevokeOptions{IOStreams: streams}
}

// Complete takes the IDs from args and builds the client.
func (o *TokensRevokeOptions) Complete(f factory.Factory, args []string) error {
	o.IDs = args
	o.namespace = f.Namespace()
	kube, err := f.KubeClient()
	o.kube = kube
	return err
}

// Validate checks the IDs. It never echoes an argument: a whole token
// pasted by mistake must not end up in an error.
func (o *TokensRevokeOptions) Validate() error {
	if len(o.IDs) == 0 {
		return errors.New("give the ID of at least one token: kubectl offload peer tokens list shows them")
	}
	for i, id := range o.IDs {
		if strings.Contains(id, ".") {
			return fmt.Errorf("argument %d looks like a whole token: give only its ID, the part before the dot", i+1)
		}
		if !tokenIDRE.MatchString(id) {
			return fmt.Errorf("argument %d is not a token ID: want 6 characters of a-z and 0-9, as kubectl offload peer tokens list shows", i+1)
		}
	}
	return nil
}

// Run deletes the token ConfigMap of every ID and reports each to Out. Unknown
// IDs are reported together at the end, unless IgnoreNotFound.
func (o *TokensRevokeOptions) Run(ctx context.Context) error {
	var missing []string
	for _, id := range o.IDs {
		name := peering.TokenConfigMapName(id)
		s, err := o.kube.CoreV1().ConfigMaps(o.namespace).Get(ctx, name, metav1.GetOptions{})
		if _, token := s.Labels[peering.TokenIDLabel]; err == nil && !token {
			err = apierrors.NewNotFound(corev1.Resource("configmaps"), name)
		}
		if err == nil {
			uid := s.UID
			err = o.kube.CoreV1().ConfigMaps(o.namespace).Delete(ctx, name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		}
		switch {
		case apierrors.IsNotFound(err):
			if o.IgnoreNotFound {
				fmt.Fprintf(o.ErrOut, "token %s not found: nothing to revoke\n", id)
			} else {
				missing = append(missing, id)
			}
		case err != nil:
			return fmt.Errorf("revoking token %s: %w", id, err)
		default:
			fmt.Fprintf(o.Out, "token %s revoked\n", id)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w in namespace %s: %s (already revoked, or never created; kubectl offload peer tokens list shows the tokens, --ignore-not-found accepts this)",
			ErrTokenNotFound, o.namespace, strings.Join(missing, ", "))
	}
	return nil
}
