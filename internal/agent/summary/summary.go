// Package summary writes the status of every ForeignCluster, on both sides
// of a peering, and is its one writer. A ForeignCluster's status is the
// summary of the objects that do the work, each with a writer of its own:
//
//   - PeeringCredentials (the credentials controller): Authenticated and
//     Unpeered, the AUTH column, the credentials' expiry, the provider's API
//     server and the peering token the status answers;
//   - VirtualNode (the virtual node's runtime): VirtualNodeReady and
//     OutgoingPeering, the OUTGOING column, the provider's policy;
//   - Tunnel (the network controller): NetworkReady and the NETWORK
//     column, from the consumer's client Tunnel, or on a provider only,
//     from the server Tunnel of the peer's tenant;
//   - Tenant, on a provider (the auth service): IncomingPeering and the
//     INCOMING column.
//
// The role is computed here, once, from both directions. lastSeen is the
// later of the children's.
package summary

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/ssa"
)

// FieldManager is the field manager of the ForeignClusters' status.
const FieldManager = "offload-summary"

// Reasons of the IncomingPeering condition.
const (
	ReasonTenantReady   = "TenantReady"
	ReasonTenantRemoved = "TenantRemoved"
)

// Reconciler writes the ForeignClusters' status from their children.
type Reconciler struct {
	Client client.Client
	// Namespace is the install namespace, where the Tunnels are.
	Namespace string
}

// SetupWithManager registers the reconciler with mgr.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("summary").
		For(&offloadv1alpha1.ForeignCluster{}).
		Owns(&offloadv1alpha1.PeeringCredentials{}).
		Owns(&offloadv1alpha1.VirtualNode{}).
		// A consumer's Tenant is named after it, as its ForeignCluster is.
		Watches(&offloadv1alpha1.Tenant{}, &handler.EnqueueRequestForObject{}).
		// Tunnels are named after the peer too: out-PEER, in-PEER.
		Watches(&offloadv1alpha1.Tunnel{}, handler.EnqueueRequestsFromMapFunc(peerOfTunnel)).
		Complete(r)
}

// peerOfTunnel maps a Tunnel to the ForeignCluster of its peer.
func peerOfTunnel(_ context.Context, o client.Object) []ctrl.Request {
	for _, role := range []offloadv1alpha1.TunnelRole{offloadv1alpha1.TunnelClient, offloadv1alpha1.TunnelServer} {
		if peer, ok := strings.CutPrefix(o.GetName(), offloadv1alpha1.TunnelName(role, "")); ok {
			return []ctrl.Request{{NamespacedName: types.NamespacedName{Name: peer}}}
		}
	}
	return nil
}

// +kubebuilder:rbac:groups=offload.io,resources=foreignclusters/status,verbs=get;patch
// +kubebuilder:rbac:groups=offload.io,resources=peeringcredentials;virtualnodes;tenants,verbs=get;list;watch
// +kubebuilder:rbac:groups=offload.io,resources=tunnels,verbs=get;list;watch,namespace=offload-system

// Reconcile writes the status of ForeignCluster req.Name.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var fc offloadv1alpha1.ForeignCluster
	if err := r.Client.Get(ctx, req.NamespacedName, &fc); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	var in Inputs
	in.Previous = &fc.Status
	pc := &offloadv1alpha1.PeeringCredentials{}
	if err := r.get(ctx, req.Name, pc); err != nil {
		return ctrl.Result{}, err
	} else if pc.UID != "" && metav1.IsControlledBy(pc, &fc) {
		in.Credentials = &pc.Status
	}
	vn := &offloadv1alpha1.VirtualNode{}
	if err := r.get(ctx, req.Name, vn); err != nil {
		return ctrl.Result{}, err
	} else if vn.UID != "" && metav1.IsControlledBy(vn, &fc) {
		in.VirtualNode = &vn.Status
	}
	t := &offloadv1alpha1.Tenant{}
	if err := r.get(ctx, req.Name, t); err != nil && !meta.IsNoMatchError(err) {
		return ctrl.Result{}, err
	}
	// A Tenant of the same name stands for this peer only if its cluster
	// ID is the peer's.
	in.Tenant = t.UID != "" && t.DeletionTimestamp.IsZero() && t.Spec.ClusterID == fc.Spec.ClusterID
	in.Outgoing, in.NetworkingDisabled = fc.Spec.OutgoingPeering.Enabled, fc.Spec.Networking.Disabled
	var err error
	if in.Tunnel, err = r.tunnel(ctx, &fc, in.Outgoing); err != nil {
		return ctrl.Result{}, err
	}
	want := Summarize(in)
	if Equal(&fc.Status, &want) {
		return ctrl.Result{}, nil
	}
	if err := ssa.ApplyStatus(ctx, r.Client, &fc, want, FieldManager); client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, fmt.Errorf("writing the status of ForeignCluster %s: %w", fc.Name, err)
	}
	return ctrl.Result{}, nil
}

// tunnel is the status of fc's Tunnel, nil when there is none: when this
// cluster consumes the peer, the client Tunnel fc owns; else the server
// Tunnel of the peer's tenant, if it serves that peer (its cluster ID).
func (r *Reconciler) tunnel(ctx context.Context, fc *offloadv1alpha1.ForeignCluster, outgoing bool) (*offloadv1alpha1.TunnelStatus, error) {
	role := offloadv1alpha1.TunnelServer
	if outgoing {
		role = offloadv1alpha1.TunnelClient
	}
	t := &offloadv1alpha1.Tunnel{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: r.Namespace, Name: offloadv1alpha1.TunnelName(role, fc.Name)}, t)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if t.Spec.Role != role || t.Spec.ClusterID != fc.Spec.ClusterID || outgoing && !metav1.IsControlledBy(t, fc) {
		return nil, nil
	}
	return &t.Status, nil
}

// get reads the cluster-scoped object name into obj; obj stays empty when
// there is none.
func (r *Reconciler) get(ctx context.Context, name string, obj client.Object) error {
	err := r.Client.Get(ctx, client.ObjectKey{Name: name}, obj)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
