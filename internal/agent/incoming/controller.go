// Package incoming records, on a provider, each consumer's peering in a
// ForeignCluster: the Tenant the auth service made is mirrored into the
// ForeignCluster named after the consumer, with IncomingPeering
// Established, so that kubectl get foreignclusters and kubectl offload
// status show both directions of every peering.
package incoming

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// Reasons of the IncomingPeering condition.
const (
	ReasonTenantReady   = "TenantReady"
	ReasonTenantRemoved = "TenantRemoved"
)

// Reconciler mirrors Tenants into ForeignClusters.
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

// Reconcile records the Tenant req.Name, or its removal, in the
// ForeignCluster of the same name.
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
	if !present && meta.FindStatusCondition(fc.Status.Conditions, offloadv1alpha1.ConditionIncomingPeering) == nil {
		// A peer that never consumed this cluster: nothing to record.
		return ctrl.Result{}, nil
	}
	if present && fc.Spec.ClusterID != t.Spec.ClusterID {
		log.FromContext(ctx).Info("A ForeignCluster with the consumer's name stands for another cluster; not recording the incoming peering in it",
			"foreignCluster", klog.KObj(&fc), "consumerID", t.Spec.ClusterID, "foreignClusterID", fc.Spec.ClusterID)
		return ctrl.Result{}, nil
	}
	return ctrl.Result{}, r.setIncoming(ctx, &fc, present)
}

// setIncoming sets the incoming side of fc's status.
func (r *Reconciler) setIncoming(ctx context.Context, fc *offloadv1alpha1.ForeignCluster, present bool) error {
	before := fc.Status.DeepCopy()
	outgoing := fc.Status.Role == offloadv1alpha1.RoleConsumer || fc.Status.Role == offloadv1alpha1.RoleConsumerAndProvider
	cond := metav1.Condition{Type: offloadv1alpha1.ConditionIncomingPeering, Status: metav1.ConditionTrue, Reason: ReasonTenantReady,
		Message: "the peer consumes this cluster's resources as tenant " + fc.Name, ObservedGeneration: fc.Generation}
	fc.Status.Incoming = offloadv1alpha1.PhaseEstablished
	switch {
	case present && outgoing:
		fc.Status.Role = offloadv1alpha1.RoleConsumerAndProvider
	case present:
		fc.Status.Role = offloadv1alpha1.RoleProvider
	default:
		cond.Status, cond.Reason, cond.Message = metav1.ConditionFalse, ReasonTenantRemoved, "the peer's tenant was removed"
		fc.Status.Incoming = offloadv1alpha1.PhaseNone
		if outgoing {
			fc.Status.Role = offloadv1alpha1.RoleConsumer
		} else {
			fc.Status.Role = offloadv1alpha1.RoleNone
		}
	}
	meta.SetStatusCondition(&fc.Status.Conditions, cond)
	if equalStatus(before, &fc.Status) {
		return nil
	}
	if err := r.Client.Status().Update(ctx, fc); err != nil {
		return fmt.Errorf("updating the status of ForeignCluster %s: %w", fc.Name, err)
	}
	return nil
}

func equalStatus(a, b *offloadv1alpha1.ForeignClusterStatus) bool {
	if a.Role != b.Role || a.Incoming != b.Incoming {
		return false
	}
	ca := meta.FindStatusCondition(a.Conditions, offloadv1alpha1.ConditionIncomingPeering)
	cb := meta.FindStatusCondition(b.Conditions, offloadv1alpha1.ConditionIncomingPeering)
	return ca != nil && cb != nil && ca.Status == cb.Status && ca.Reason == cb.Reason && ca.Message == cb.Message
}
