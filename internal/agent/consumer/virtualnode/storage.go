package virtualnode

import (
	"context"
	"fmt"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/storage"
)

var _ storage.Peers = (*Reconciler)(nil)

// ByNode implements storage.Peers: the running peering of virtual node
// node, with the storage its provider lends.
func (r *Reconciler) ByNode(ctx context.Context, node string) (storage.Peer, bool, error) {
	rt, run := r.podsOf(node)
	if rt == nil || run == nil {
		return storage.Peer{}, false, nil
	}
	p := r.storagePeer(rt, run)
	var err error
	if p.ConsumerID, err = r.consumerClusterID(ctx); err != nil {
		return storage.Peer{}, false, err
	}
	return p, true, nil
}

// ByClusterID implements storage.Peers: the running peering with provider
// clusterID, or whether this cluster still peers with it.
func (r *Reconciler) ByClusterID(ctx context.Context, clusterID string) (storage.Peer, bool, bool, error) {
	if rt, run := r.runtimeWhere(func(p *peer) bool { return p.fc.Spec.ClusterID == clusterID }); run != nil {
		return r.storagePeer(rt, run), true, true, nil
	}
	var list offloadv1alpha1.ForeignClusterList
	if err := r.Reader.List(ctx, &list); err != nil {
		return storage.Peer{}, false, false, fmt.Errorf("listing the ForeignClusters: %w", err)
	}
	for _, fc := range list.Items {
		if fc.Spec.ClusterID == clusterID && fc.DeletionTimestamp.IsZero() {
			return storage.Peer{}, false, true, nil
		}
	}
	return storage.Peer{}, false, false, nil
}

// storagePeer is what the storage provisioner needs of rt.
func (r *Reconciler) storagePeer(rt *peerRuntime, run *podsRun) storage.Peer {
	p := storage.Peer{Name: rt.peer.fc.Name, ClusterID: rt.peer.fc.Spec.ClusterID, Provider: rt.peer.provider, TwinNamespace: run.handler.TwinNamespace}
	if pol := rt.peer.providerPolicy(); pol != nil {
		p.Storage = pol.Storage
	}
	return p
}
