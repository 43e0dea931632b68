// Package tenant owns the teardown of a consumer's tenant on a provider.
// Every Tenant carries offloadv1alpha1.FinalizerTenant from its creation by
// the auth service; whoever deletes the Tenant (the consumer through
// /v1/unpeer, kubectl offload unpeer NAME --incoming, uninstall) only
// deletes it and waits. This controller then revokes the consumer's
// credentials (its RoleBinding first, which the RBAC authorizer drops at
// once, then its ServiceAccount, which invalidates every token it had),
// starts the deletion of the tenant namespace, whose RemoteNamespaces make
// the remotenamespace controller remove the twin namespaces and their pods,
// and lets the Tenant go. Whoever waits for the rest (unpeer --incoming,
// uninstall) waits for the namespace.
package tenant

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// ControllerName names the controller in logs and metrics.
const ControllerName = "tenant"

// Reconciler retires the replaced credentials of live Tenants and tears
// down deleted ones.
type Reconciler struct {
	Client client.Client
	// Reader reads peering tokens, uncached, from Namespace, the install
	// namespace (AdoptTokenPolicy).
	Reader    client.Reader
	Namespace string
	// CredentialGrace is how long replaced credentials keep working; zero
	// means DefaultCredentialGrace.
	CredentialGrace time.Duration
	// AbandonedAfter is how long after its credentials expired a consumer
	// that never refreshed them is taken as gone for good: its Tenant is
	// deleted, with its twin namespaces. Zero means DefaultAbandonedAfter.
	AbandonedAfter time.Duration
}

// DefaultAbandonedAfter is AbandonedAfter's default: a consumer down for a
// day past its credentials' expiry is gone.
const DefaultAbandonedAfter = 24 * time.Hour

// SetupWithManager registers the reconciler with mgr.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Reader == nil {
		r.Reader = mgr.GetAPIReader()
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&offloadv1alpha1.Tenant{}).
		Complete(r)
}

// Reconcile keeps the finalizer on a live Tenant, gives it its peering
// token's policy and retires its replaced credentials, and tears a deleted
// one down.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var t offloadv1alpha1.Tenant
	if err := r.Client.Get(ctx, req.NamespacedName, &t); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if t.DeletionTimestamp.IsZero() {
		// The auth service creates Tenants with the finalizer; this adds it
		// to those made before it did.
		if controllerutil.AddFinalizer(&t, offloadv1alpha1.FinalizerTenant) {
			if err := r.Client.Update(ctx, &t); err != nil {
				return ctrl.Result{}, fmt.Errorf("adding the finalizer of Tenant %s: %w", t.Name, err)
			}
		}
		if _, err := AdoptTokenPolicy(ctx, r.Client, r.Reader, r.Namespace, &t); err != nil {
			return ctrl.Result{}, err
		}
		deleted, left, err := r.collectAbandoned(ctx, &t)
		if err != nil || deleted {
			return ctrl.Result{}, err
		}
		// A conflict (the auth service recorded a credential meanwhile) is
		// retried with backoff like any error.
		wait, err := r.retire(ctx, &t)
		if err != nil {
			return ctrl.Result{}, err
		}
		if wait == 0 || left > 0 && left < wait {
			wait = left
		}
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	if !controllerutil.ContainsFinalizer(&t, offloadv1alpha1.FinalizerTenant) {
		return ctrl.Result{}, nil
	}
	if err := r.teardown(ctx, &t); err != nil {
		return ctrl.Result{}, err
	}
	controllerutil.RemoveFinalizer(&t, offloadv1alpha1.FinalizerTenant)
	if err := r.Client.Update(ctx, &t); client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, fmt.Errorf("removing the finalizer of Tenant %s: %w", t.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Removed the tenant", "tenant", klog.KObj(&t), "consumerID", t.Spec.ClusterID)
	return ctrl.Result{}, nil
}

// teardown revokes the consumer's credentials and deletes its tenant namespace.
func (r *Reconciler) teardown(ctx context.Context, t *offloadv1alpha1.Tenant) error {
	ns := t.Spec.TenantNamespace
	if ns == "" {
		return nil
	}
	// The RoleBinding goes first: the RBAC authorizer drops it within
	// milliseconds, while the API server keeps accepting a token it has
	// already validated for up to 10 s after its ServiceAccount is gone.
	rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.TenantRole, Namespace: ns}}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.ConsumerServiceAccount, Namespace: ns}}
	for _, o := range []client.Object{rb, sa} {
		if err := r.Client.Delete(ctx, o); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("revoking the credentials of consumer %s (%T %s/%s): %w", t.Name, o, ns, o.GetName(), err)
		}
	}
	var namespace corev1.Namespace
	err := r.Client.Get(ctx, types.NamespacedName{Name: ns}, &namespace)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading the tenant namespace %s: %w", ns, err)
	case namespace.Labels[offloadv1alpha1.LabelTenant] != t.Spec.ClusterID:
		// Not this consumer's namespace: leave it alone.
		return nil
	case namespace.DeletionTimestamp.IsZero():
		if err := r.Client.Delete(ctx, &namespace, client.PropagationPolicy(metav1.DeletePropagationBackground)); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting the tenant namespace %s: %w", ns, err)
		}
	}
	return nil
}

// collectAbandoned deletes t when its consumer let its credentials expire
// AbandonedAfter ago without refreshing them: it is gone for good, and its
// teardown (this controller's finalizer) removes its namespaces. It
// returns whether it deleted t, and otherwise how long until it would.
func (r *Reconciler) collectAbandoned(ctx context.Context, t *offloadv1alpha1.Tenant) (bool, time.Duration, error) {
	if t.Status.CredentialExpiry == nil {
		return false, 0, nil
	}
	after := r.AbandonedAfter
	if after == 0 {
		after = DefaultAbandonedAfter
	}
	if left := time.Until(t.Status.CredentialExpiry.Add(after)); left > 0 {
		return false, left, nil
	}
	uid := t.UID
	if err := r.Client.Delete(ctx, t, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
		return false, 0, fmt.Errorf("deleting the abandoned tenant %s: %w", t.Name, err)
	}
	ctrl.LoggerFrom(ctx).Info("Removing a consumer gone for good: its credentials expired and were not renewed",
		"tenant", klog.KObj(t), "expired", t.Status.CredentialExpiry.Time, "after", after)
	return true, 0, nil
}
