package auth

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

const (
	// TokenRetention is how long a token ConfigMap is kept after its token
	// expired: peer tokens list shows it as expired (or used) meanwhile,
	// and a consumer that presents it is told it expired.
	TokenRetention = time.Hour
	// tokenCleanInterval is how often expired tokens are removed.
	tokenCleanInterval = 10 * time.Minute
)

// CleanTokens removes, every tokenCleanInterval until ctx ends, the token
// ConfigMaps whose token expired more than TokenRetention ago: nobody has to
// revoke a token for it to go.
func (p *Peering) CleanTokens(ctx context.Context) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if err := p.cleanTokens(ctx); err != nil && ctx.Err() == nil {
			p.opts.Logger.Error(err, "Removing expired peering tokens")
		}
	}, tokenCleanInterval)
}

// cleanTokens removes the token ConfigMaps whose token expired more than
// TokenRetention ago. One it cannot read as a token is left alone.
func (p *Peering) cleanTokens(ctx context.Context) error {
	var list corev1.ConfigMapList
	if err := p.client.List(ctx, &list, client.InNamespace(p.opts.Namespace), client.HasLabels{peering.TokenIDLabel}); err != nil {
		return err
	}
	for i := range list.Items {
		s := &list.Items[i]
		t, err := peering.ReadTokenConfigMap(s)
		if err != nil || !t.Expired(p.now().Add(-TokenRetention)) {
			continue
		}
		if err := p.client.Delete(ctx, s, client.Preconditions{UID: &s.UID}); client.IgnoreNotFound(err) != nil {
			return err
		}
		p.opts.Logger.Info("Removed an expired peering token", "tokenID", t.ID, "expired", t.Expires, "configMap", klog.KObj(s))
	}
	return nil
}
