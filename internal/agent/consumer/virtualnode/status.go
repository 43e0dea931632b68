package virtualnode

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/children"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/ssa"
)

// FieldManager is the field manager of the VirtualNodes' status: the
// virtual nodes' runtimes are its one writer.
const FieldManager = "offload-virtual-node"

// lastSeenResolution is how stale status.lastSeen of a VirtualNode may be.
const lastSeenResolution = 30 * time.Second

// conditions returns the current conditions of VirtualNode name.
func (r *Reconciler) conditions(ctx context.Context, name string) []metav1.Condition {
	var vn offloadv1alpha1.VirtualNode
	if err := r.Client.Get(ctx, client.ObjectKey{Name: name}, &vn); err != nil {
		return nil
	}
	return vn.Status.Conditions
}

// ensureVirtualNode creates the VirtualNode of fc, owned by it, unless it
// exists; one an earlier ForeignCluster of the same name left is replaced.
func (r *Reconciler) ensureVirtualNode(ctx context.Context, fc *offloadv1alpha1.ForeignCluster) error {
	_, err := children.Ensure(ctx, r.Client, r.Reader, fc, &offloadv1alpha1.VirtualNode{
		ObjectMeta: metav1.ObjectMeta{Name: fc.Name},
		Spec: offloadv1alpha1.VirtualNodeSpec{
			NodeName: offloadv1alpha1.VirtualNodeName(fc.Name), CredentialsName: fc.Name, ClusterID: fc.Spec.ClusterID,
		},
	}, &offloadv1alpha1.VirtualNode{})
	return err
}

// updateStatus changes the status of VirtualNode name with change and
// applies it when change reports a difference. The runtimes of the peers
// and the Reconciler write it one at a time.
func (r *Reconciler) updateStatus(ctx context.Context, name string, change func(*offloadv1alpha1.VirtualNodeStatus)) error {
	r.statusMu.Lock()
	defer r.statusMu.Unlock()
	// Read from the API server, not a cache: the status is applied whole,
	// so it must start from the last one written.
	var vn offloadv1alpha1.VirtualNode
	if err := r.Reader.Get(ctx, client.ObjectKey{Name: name}, &vn); err != nil {
		return client.IgnoreNotFound(err)
	}
	before := vn.Status.DeepCopy()
	change(&vn.Status)
	if equality.Semantic.DeepEqual(before, &vn.Status) {
		return nil
	}
	if err := ssa.ApplyStatus(ctx, r.Client, &vn, vn.Status, FieldManager); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("writing the status of VirtualNode %s: %w", name, err)
	}
	return nil
}

// setStatus sets OfferRead and Ready on VirtualNode name, with its phase
// following OfferRead, and CredentialsAccepted False when reason says the
// provider answered 401. Unknown means pending: kubectl offload peer --wait
// keeps waiting on Unknown and stops on False.
//
// seen records that the provider answered: status.lastSeen is refreshed
// when it is older than lastSeenResolution, so a healthy peer costs one
// status write per lastSeenResolution.
func (r *Reconciler) setStatus(ctx context.Context, name string, outgoing, ready metav1.ConditionStatus, reason, message string, seen bool) error {
	return r.updateStatus(ctx, name, func(st *offloadv1alpha1.VirtualNodeStatus) {
		set := func(t string, s metav1.ConditionStatus, reason, message string) {
			meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: t, Status: s, Reason: reason, Message: message})
		}
		st.Phase = offloadv1alpha1.PhasePending
		switch outgoing {
		case metav1.ConditionTrue:
			set(offloadv1alpha1.ConditionOfferRead, outgoing, ReasonEstablished, "the provider's ResourceOffer was read")
			st.Phase = offloadv1alpha1.PhaseEstablished
		case metav1.ConditionFalse:
			set(offloadv1alpha1.ConditionOfferRead, outgoing, reason, message)
			st.Phase = offloadv1alpha1.PhaseNone
		default:
			set(offloadv1alpha1.ConditionOfferRead, outgoing, reason, message)
		}
		set(offloadv1alpha1.ConditionReady, ready, reason, message)
		if reason == offloadv1alpha1.ReasonUnauthorized {
			set(offloadv1alpha1.ConditionCredentialsAccepted, metav1.ConditionFalse, reason, message)
		} else if ready == metav1.ConditionTrue {
			set(offloadv1alpha1.ConditionCredentialsAccepted, metav1.ConditionTrue, ReasonNodeReady, "the provider accepts the credentials")
		}
		if now := time.Now(); seen && (st.LastSeen == nil || now.Sub(st.LastSeen.Time) >= lastSeenResolution) {
			st.LastSeen = &metav1.Time{Time: now}
		}
	})
}

// setProviderPolicy records in VirtualNode name's status what the provider
// lets this cluster's pods do there; it writes only on a change.
func (r *Reconciler) setProviderPolicy(ctx context.Context, name string, policy offloadv1alpha1.ConsumerPolicy) error {
	policy.PodSecurity = policy.Level()
	return r.updateStatus(ctx, name, func(st *offloadv1alpha1.VirtualNodeStatus) {
		if st.ProviderPolicy == nil || !st.ProviderPolicy.Equal(policy) {
			st.ProviderPolicy = &policy
		}
	})
}
