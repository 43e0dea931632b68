package auth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// A cluster ID belongs to one consumer. The Tenant is named after the
// consumer, so two first peerings that name one cluster ID under two names
// could both pass the check of the other Tenants and create one each. The
// claim closes that race: a Lease in the agent's namespace whose name is
// derived from the cluster ID and whose holder is the consumer name, which
// the API server lets only one request create. Once the Tenant exists, it
// owns its claim, so the garbage collector removes it with the Tenant.

// claimPending is how long a claim whose Tenant does not exist yet stands:
// past it, the peering that made it failed without undoing it (the process
// died), and the claim is taken over.
const claimPending = 2 * requestTimeout

// claimName returns the name of cluster ID id's claim: cluster IDs are
// label values, which may hold characters object names may not.
func claimName(id string) string {
	sum := sha256.Sum256([]byte(id))
	return "offload-cluster-id-" + hex.EncodeToString(sum[:10])
}

// claimClusterID makes cluster ID id the consumer name's, unless a live
// claim gives it to another consumer. It returns release, which removes the
// claim when this call created it (a failed peering undoes it), and does
// nothing otherwise.
func (p *Peering) claimClusterID(ctx context.Context, id, name string) (release func(), err error) {
	for attempt := 0; ; attempt++ {
		c := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: claimName(id), Namespace: p.opts.Namespace,
				Labels: map[string]string{offloadv1alpha1.LabelTenant: id}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(name)},
		}
		created, err := p.createOrGet(ctx, c)
		if err != nil {
			return nil, err
		}
		if created {
			return func() {
				dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
				defer cancel()
				if err := p.client.Delete(dctx, c, client.Preconditions{UID: &c.UID}); client.IgnoreNotFound(err) != nil {
					p.opts.Logger.Error(err, "Releasing the claim of a failed peering", "claim", c.Name)
				}
			}, nil
		}
		live, err := p.claimLive(ctx, c)
		if err != nil {
			return nil, err
		}
		if live {
			if ptr.Deref(c.Spec.HolderIdentity, "") == name {
				return func() {}, nil
			}
			return nil, tenantConflict("cluster ID %s is already peered with this provider under another name, or is being peered: a cluster ID belongs to one consumer; unpeer that one first, or peer from the cluster that owns the ID", id)
		}
		if attempt > 0 {
			return nil, fmt.Errorf("the claim %s of cluster ID %s keeps coming back stale", c.Name, id)
		}
		// Stale: its Tenant is gone. Remove exactly that claim and try again.
		if err := p.client.Delete(ctx, c, client.Preconditions{UID: &c.UID}); client.IgnoreNotFound(err) != nil && !apierrors.IsConflict(err) {
			return nil, fmt.Errorf("removing the stale claim %s of cluster ID %s: %w", c.Name, id, err)
		}
	}
}

// claimLive reports whether claim c still stands: its owner Tenant exists,
// or it has no owner yet and is younger than claimPending.
func (p *Peering) claimLive(ctx context.Context, c *coordinationv1.Lease) (bool, error) {
	if len(c.OwnerReferences) == 0 {
		return time.Since(c.CreationTimestamp.Time) < claimPending, nil
	}
	for _, o := range c.OwnerReferences {
		var t offloadv1alpha1.Tenant
		err := p.client.Get(ctx, client.ObjectKey{Name: o.Name}, &t)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return false, fmt.Errorf("reading tenant %s: %w", o.Name, err)
		}
		if t.UID == o.UID {
			return true, nil
		}
	}
	return false, nil
}

// ownClaim makes Tenant t the owner of its cluster ID's claim.
func (p *Peering) ownClaim(ctx context.Context, t *offloadv1alpha1.Tenant) error {
	var c coordinationv1.Lease
	if err := p.client.Get(ctx, client.ObjectKey{Namespace: p.opts.Namespace, Name: claimName(t.Spec.ClusterID)}, &c); err != nil {
		return fmt.Errorf("reading the claim of cluster ID %s: %w", t.Spec.ClusterID, err)
	}
	owner := metav1.OwnerReference{APIVersion: offloadv1alpha1.GroupVersion.String(), Kind: "Tenant", Name: t.Name, UID: t.UID}
	if len(c.OwnerReferences) == 1 && c.OwnerReferences[0] == owner {
		return nil
	}
	c.OwnerReferences = []metav1.OwnerReference{owner}
	if err := p.client.Update(ctx, &c); err != nil {
		return fmt.Errorf("making tenant %s the owner of the claim of cluster ID %s: %w", t.Name, t.Spec.ClusterID, err)
	}
	return nil
}
