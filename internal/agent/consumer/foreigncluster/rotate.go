package foreigncluster

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// Reasons of Authenticated=False once the credentials could not be renewed.
// Only a successful renewal, or peering again, sets Authenticated back to True.
const (
	// ReasonCredentialsRefused: the provider refused to renew them.
	ReasonCredentialsRefused = "CredentialsRefused"
	// ReasonCredentialsExpired: they expired before they could be renewed.
	ReasonCredentialsExpired = "CredentialsExpired"
	// ReasonInsecureProvider: the provider's API server is not reached over
	// verified https, so its credentials are not kept.
	ReasonInsecureProvider = "InsecureProvider"
)

// renewalFailed reports whether pc's Authenticated condition says the
// credentials could not be renewed.
func renewalFailed(pc *offloadv1alpha1.PeeringCredentials) bool {
	c := meta.FindStatusCondition(pc.Status.Conditions, offloadv1alpha1.ConditionAuthenticated)
	return c != nil && c.Status == metav1.ConditionFalse && (c.Reason == ReasonCredentialsRefused || c.Reason == ReasonCredentialsExpired)
}

// refreshAt is the share of a credential's lifetime after which the agent
// renews it: a third of the lifetime is left to retry failures in.
const refreshAt = 2.0 / 3

// Bounds of the wait before a failed renewal is retried.
const (
	minRefreshRetry = 5 * time.Second
	maxRefreshRetry = time.Minute
)

// refreshTime is when credentials issued at issued and expiring at expiry
// are renewed.
func refreshTime(issued, expiry time.Time) time.Time {
	return issued.Add(time.Duration(float64(expiry.Sub(issued)) * refreshAt))
}

// retryDelay is how long to wait before retrying a failed renewal of
// credentials expiring at expiry: a tenth of what is left, within bounds,
// and the longest wait once they have expired.
func retryDelay(expiry, now time.Time) time.Duration {
	if !now.Before(expiry) {
		return maxRefreshRetry
	}
	return min(max(expiry.Sub(now)/10, minRefreshRetry), maxRefreshRetry)
}

// rotate renews the credentials through the provider's /v1/refresh once
// two thirds of their lifetime has passed, and asks to be called again
// when the next renewal is due.
func (r *Reconciler) rotate(ctx context.Context, logger klog.Logger, fc *offloadv1alpha1.ForeignCluster, pc *offloadv1alpha1.PeeringCredentials, kubeconfig *corev1.Secret) (ctrl.Result, error) {
	expiry, issued, err := peering.CredentialTimes(kubeconfig)
	if err != nil {
		return ctrl.Result{}, err
	}
	now := time.Now()
	if due := refreshTime(issued, expiry); now.Before(due) {
		return ctrl.Result{RequeueAfter: due.Sub(now)}, nil
	}
	token, err := peering.BearerToken(kubeconfig)
	if err != nil {
		return ctrl.Result{}, err
	}
	identity, err := peering.ReadIdentity(ctx, r.Reader, r.Namespace)
	if err != nil {
		return ctrl.Result{}, err
	}
	resp, err := r.authClient(fc).Refresh(ctx, token, identity.ID)
	var authErr *peering.Error
	switch {
	case errors.As(err, &authErr) && authErr.Status == http.StatusUnauthorized:
		logger.Info("The provider refused to renew the credentials", "foreignCluster", klog.KObj(fc), "reason", authErr.Reason)
		msg := fmt.Sprintf("the provider refused to renew the credentials, which expire at %s (%s): run kubectl offload unpeer %s, then peer again with a new token from kubectl offload peer generate on the provider",
			expiry.UTC().Format(time.RFC3339), authErr.Message, fc.Name)
		return ctrl.Result{RequeueAfter: retryDelay(expiry, now)}, r.setFailed(ctx, pc, ReasonCredentialsRefused, msg)
	case err != nil:
		delay := retryDelay(expiry, now)
		logger.Info("Cannot renew the credentials yet; retrying", "foreignCluster", klog.KObj(fc), "error", err.Error(),
			"expiration", expiry, "retryAfter", delay)
		if now.After(expiry) {
			msg := fmt.Sprintf("the credentials expired at %s before they could be renewed (%v); the agent keeps trying: check that the provider's auth service at %s is reachable, or run kubectl offload unpeer %s and peer again",
				expiry.UTC().Format(time.RFC3339), err, fc.Spec.AuthURL, fc.Name)
			return ctrl.Result{RequeueAfter: delay}, r.setFailed(ctx, pc, ReasonCredentialsExpired, msg)
		}
		return ctrl.Result{RequeueAfter: delay}, nil
	}
	if !resp.Credentials.ExpirationTimestamp.After(time.Now()) {
		logger.Info("The provider renewed the credentials with an expiry in the past; retrying", "foreignCluster", klog.KObj(fc),
			"expiration", resp.Credentials.ExpirationTimestamp)
		return ctrl.Result{RequeueAfter: retryDelay(expiry, now)}, nil
	}
	fresh, err := r.kubeconfigSecret(fc, resp.Credentials)
	if err != nil {
		return ctrl.Result{}, err
	}
	kubeconfig.Data = fresh.Data
	if err := r.Client.Update(ctx, kubeconfig); err != nil {
		// The new token is lost; the old one still works until it expires,
		// so the next attempt asks again.
		return ctrl.Result{}, fmt.Errorf("storing the renewed credentials in Secret %s: %w", kubeconfig.Name, err)
	}
	logger.Info("Renewed the credentials", "foreignCluster", klog.KObj(fc), "expiration", resp.Credentials.ExpirationTimestamp)
	seen := metav1.Now()
	pc.Status.LastSeen = &seen
	pc.Status.Expiry = &metav1.Time{Time: resp.Credentials.ExpirationTimestamp}
	pc.Status.Phase = offloadv1alpha1.PhaseEstablished
	meta.SetStatusCondition(&pc.Status.Conditions, metav1.Condition{
		Type: offloadv1alpha1.ConditionAuthenticated, Status: metav1.ConditionTrue, Reason: ReasonAuthenticated,
		Message: "the provider renewed the credentials, kept in Secret " + kubeconfig.Name, ObservedGeneration: pc.Generation,
	})
	if err := r.writeStatus(ctx, pc); err != nil {
		return ctrl.Result{}, err
	}
	next := time.Until(refreshTime(time.Now(), resp.Credentials.ExpirationTimestamp))
	return ctrl.Result{RequeueAfter: max(next, minRefreshRetry)}, nil
}

// httpTimeout bounds a call to a provider.
func (r *Reconciler) httpTimeout() time.Duration {
	if r.HTTPClientTimeout <= 0 {
		return DefaultHTTPClientTimeout
	}
	return r.HTTPClientTimeout
}

// authClient returns a client of the auth service of fc.
func (r *Reconciler) authClient(fc *offloadv1alpha1.ForeignCluster) *peering.Client {
	return peering.NewClient(fc.Spec.AuthURL, fc.Spec.CACertHash, r.httpTimeout())
}
