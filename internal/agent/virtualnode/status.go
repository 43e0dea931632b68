package virtualnode

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// lastSeenResolution is how stale status.lastSeen of a ForeignCluster may be.
const lastSeenResolution = 30 * time.Second

// conditions returns the current conditions of ForeignCluster name.
func (r *Reconciler) conditions(ctx context.Context, name string) []metav1.Condition {
	var fc offloadv1alpha1.ForeignCluster
	if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, &fc); err != nil {
		return nil
	}
	return fc.Status.Conditions
}

// setStatus sets OutgoingPeering and VirtualNodeReady on ForeignCluster
// name, with status.outgoing following OutgoingPeering; it writes only when
// something changed. Unknown means pending: kubectl offload peer --wait keeps
// waiting on Unknown and stops on False.
//
// seen records that the provider answered: status.lastSeen is refreshed
// when it is older than lastSeenResolution, so a healthy peer costs one
// status write per lastSeenResolution.
func (r *Reconciler) setStatus(ctx context.Context, name string, outgoing, ready metav1.ConditionStatus, reason, message string, seen bool) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var fc offloadv1alpha1.ForeignCluster
		if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, &fc); err != nil {
			return client.IgnoreNotFound(err)
		}
		changed := false
		set := func(t string, s metav1.ConditionStatus, reason, message string) {
			c := metav1.Condition{Type: t, Status: s, Reason: reason, Message: message, ObservedGeneration: fc.Generation}
			changed = meta.SetStatusCondition(&fc.Status.Conditions, c) || changed
		}
		phase := offloadv1alpha1.PhasePending
		switch outgoing {
		case metav1.ConditionTrue:
			set(offloadv1alpha1.ConditionOutgoingPeering, outgoing, ReasonEstablished, "the provider's ResourceOffer was read")
			phase = offloadv1alpha1.PhaseEstablished
		case metav1.ConditionFalse:
			set(offloadv1alpha1.ConditionOutgoingPeering, outgoing, reason, message)
			phase = offloadv1alpha1.PhaseNone
		default:
			set(offloadv1alpha1.ConditionOutgoingPeering, outgoing, reason, message)
		}
		set(offloadv1alpha1.ConditionVirtualNodeReady, ready, reason, message)
		if phase != fc.Status.Outgoing {
			fc.Status.Outgoing = phase
			changed = true
		}
		if now := time.Now(); seen && (fc.Status.LastSeen == nil || now.Sub(fc.Status.LastSeen.Time) >= lastSeenResolution) {
			fc.Status.LastSeen = &metav1.Time{Time: now}
			changed = true
		}
		if !changed {
			return nil
		}
		return r.Client.Status().Update(ctx, &fc)
	})
}

// setProviderPolicy records in ForeignCluster name's status what the
// provider lets this cluster's pods do there; it writes only on a change.
func (r *Reconciler) setProviderPolicy(ctx context.Context, name string, policy offloadv1alpha1.ConsumerPolicy) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var fc offloadv1alpha1.ForeignCluster
		if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, &fc); err != nil {
			return client.IgnoreNotFound(err)
		}
		policy.PodSecurity = policy.Level()
		if fc.Status.ProviderPolicy != nil && fc.Status.ProviderPolicy.Equal(policy) {
			return nil
		}
		fc.Status.ProviderPolicy = &policy
		return r.Client.Status().Update(ctx, &fc)
	})
}
