package auth

import (
	"context"
	"fmt"
	"net/http"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

const unauthorizedMessage = "the credentials are not valid for this provider: peer again with a token from `kubectl offload peer generate`"

func unauthorized() error {
	return &peering.Error{Reason: peering.ReasonUnauthorized, Message: unauthorizedMessage, Status: http.StatusUnauthorized}
}

func (p *Peering) handleRefresh(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	log := p.opts.Logger
	t, err := p.authenticate(ctx, w, r)
	if err != nil {
		p.fail(w, log, "Refused a refresh request", err)
		return
	}
	log = log.WithValues("consumer", t.Spec.ClusterName, "consumerID", t.Spec.ClusterID)
	self, err := peering.ReadIdentity(ctx, p.client, p.opts.Namespace)
	if err != nil {
		p.fail(w, log, "Refreshing credentials", err)
		return
	}
	resp, err := p.issue(ctx, t, self, false)
	if err != nil {
		p.fail(w, log, "Refreshing credentials", err)
		return
	}
	log.Info("Refreshed credentials", "expires", resp.Credentials.ExpirationTimestamp, "source", sourceKey(r.RemoteAddr))
	writeJSON(w, resp)
}

func (p *Peering) handleUnpeer(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
	defer cancel()
	log := p.opts.Logger
	t, err := p.authenticate(ctx, w, r)
	if err != nil {
		p.fail(w, log, "Refused an unpeer request", err)
		return
	}
	log = log.WithValues("consumer", t.Spec.ClusterName, "consumerID", t.Spec.ClusterID)
	if err := p.unpeer(ctx, t); err != nil {
		p.fail(w, log, "Unpeering", err)
		return
	}
	log.Info("Unpeered", "tenantNamespace", t.Spec.TenantNamespace)
	writeJSON(w, struct{}{})
}

// authenticate returns the Tenant whose ServiceAccount the request's bearer
// token belongs to, as a TokenReview says, provided the Tenant has the
// cluster ID of the body. Any mismatch is the same Unauthorized.
func (p *Peering) authenticate(ctx context.Context, w http.ResponseWriter, r *http.Request) (*offloadv1alpha1.Tenant, error) {
	var req peering.RefreshRequest
	if err := readRequest(w, r, &req, "RefreshRequest"); err != nil {
		return nil, err
	}
	token := bearerToken(r)
	if token == "" || req.ClusterID == "" {
		return nil, unauthorized()
	}
	review := &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}
	if err := p.client.Create(ctx, review); err != nil {
		return nil, fmt.Errorf("reviewing a consumer token: %w", err)
	}
	if !review.Status.Authenticated {
		p.detectReplay(ctx, token)
		return nil, unauthorized()
	}
	name, ok := consumerFromUsername(review.Status.User.Username)
	if !ok {
		p.opts.Logger.Info("A token of another identity asked for tenant credentials", "user", review.Status.User.Username)
		return nil, unauthorized()
	}
	var t offloadv1alpha1.Tenant
	err := p.client.Get(ctx, client.ObjectKey{Name: name}, &t)
	if apierrors.IsNotFound(err) {
		return nil, unauthorized()
	}
	if err != nil {
		return nil, fmt.Errorf("reading tenant %s: %w", name, err)
	}
	if t.Spec.ClusterID != req.ClusterID || t.Spec.TenantNamespace != offloadv1alpha1.TenantNamespace(name) || t.DeletionTimestamp != nil {
		p.opts.Logger.Info("A tenant token came with another cluster ID", "tenant", klog.KObj(&t), "consumerID", req.ClusterID)
		return nil, unauthorized()
	}
	return &t, nil
}
