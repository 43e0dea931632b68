// Package incoming records, on a provider, each consumer's peering in a
// ForeignCluster: for the Tenant the auth service made there is a
// ForeignCluster named after the consumer, so that kubectl get
// foreignclusters and kubectl offload status show both directions of every
// peering. The summary controller writes its status (IncomingPeering) from
// the Tenant.
package incoming

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// Reconciler keeps a ForeignCluster for each Tenant.
type Reconciler struct {
	Client client.Client
}

// SetupWithManager registers the reconciler with mgr.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("incoming").
		For(&offloadv1alpha1.Tenant{}).
		// A ForeignCluster deleted to end the outgoing peering with a
		// cluster that still consumes this one is recreated to record the
		// incoming peering: unpeer ends one direction only.
		Watches(&offloadv1alpha1.ForeignCluster{}, &handler.EnqueueRequestForObject{}).
		Complete(r)
}

// Reconcile creates the ForeignCluster of Tenant req.Name, or deletes the
// one it created once the Tenant is gone.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var t offloadv1alpha1.Tenant
	err := r.Client.Get(ctx, req.NamespacedName, &t)
	if err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, err
	}
	present := err == nil && t.DeletionTimestamp.IsZero()
	var fc offloadv1alpha1.ForeignCluster
	err = r.Client.Get(ctx, types.NamespacedName{Name: req.Name}, &fc)
	switch {
	case apierrors.IsNotFound(err) && !present:
		return ctrl.Result{}, nil
	case apierrors.IsNotFound(err):
		fc = offloadv1alpha1.ForeignCluster{
			ObjectMeta: metav1.ObjectMeta{Name: req.Name, Labels: map[string]string{offloadv1alpha1.LabelIncomingOnly: "true"}},
			Spec:       offloadv1alpha1.ForeignClusterSpec{ClusterID: t.Spec.ClusterID, ClusterName: t.Spec.ClusterName},
		}
		if err := r.Client.Create(ctx, &fc); err != nil {
			return ctrl.Result{}, fmt.Errorf("recording consumer %s in a ForeignCluster: %w", req.Name, err)
		}
	case err != nil:
		return ctrl.Result{}, err
	}
	if !present && fc.Labels[offloadv1alpha1.LabelIncomingOnly] == "true" {
		return ctrl.Result{}, client.IgnoreNotFound(r.Client.Delete(ctx, &fc))
	}
	return ctrl.Result{}, nil
}
