package namespaceoffloading

import (
	"context"
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// choice is what a NamespaceOffloading makes of one peer.
type choice int

const (
	// selected: the peer is usable and its virtual node matches the selector.
	selected choice = iota
	// deselected: the peer is not to have a twin namespace (outgoing
	// peering off, being unpeered, or its virtual node does not match).
	deselected
	// onHold: the peer cannot be judged now (not authenticated, no virtual
	// node yet); a twin namespace it has is kept, none is asked for.
	onHold
)

// candidate is one peer and what a NamespaceOffloading makes of it.
type candidate struct {
	fc     *offloadv1alpha1.ForeignCluster
	choice choice
	// why says why a peer is on hold.
	why string
}

// peers returns every ForeignCluster, by name, with what sel makes of it.
// Only a peer that was judged usable and matching is selected: a peer whose
// credentials are being renewed, or whose virtual node is briefly missing,
// is on hold rather than deselected, so a blip never deletes a twin
// namespace and the pods in it.
func (r *Reconciler) peers(ctx context.Context, sel *corev1.NodeSelector) ([]candidate, error) {
	var list offloadv1alpha1.ForeignClusterList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("listing ForeignClusters: %w", err)
	}
	sort.Slice(list.Items, func(i, j int) bool { return list.Items[i].Name < list.Items[j].Name })
	out := make([]candidate, 0, len(list.Items))
	for i := range list.Items {
		fc := &list.Items[i]
		if fc.Spec.ClusterID == "" {
			continue
		}
		c := candidate{fc: fc}
		switch {
		case !fc.DeletionTimestamp.IsZero() || !fc.Spec.OutgoingPeering.Enabled:
			c.choice = deselected
		case !meta.IsStatusConditionTrue(fc.Status.Conditions, offloadv1alpha1.ConditionAuthenticated):
			c.choice, c.why = onHold, fmt.Sprintf("peer %s is not authenticated: see kubectl get foreigncluster %s", fc.Name, fc.Name)
		case !selects(sel):
			c.choice = selected
		default:
			var node corev1.Node
			err := r.Client.Get(ctx, types.NamespacedName{Name: offloadv1alpha1.VirtualNodeName(fc.Name)}, &node)
			switch {
			case apierrors.IsNotFound(err):
				c.choice, c.why = onHold, fmt.Sprintf("peer %s has no virtual node %s yet to match the cluster selector against", fc.Name, offloadv1alpha1.VirtualNodeName(fc.Name))
			case err != nil:
				return nil, fmt.Errorf("reading virtual node %s: %w", offloadv1alpha1.VirtualNodeName(fc.Name), err)
			case matches(sel, &node):
				c.choice = selected
			default:
				c.choice = deselected
			}
		}
		out = append(out, c)
	}
	return out, nil
}

// selects says whether sel narrows the peers: a nil selector, or one
// without terms, selects them all, as the scheduling webhook reads it.
func selects(sel *corev1.NodeSelector) bool { return sel != nil && len(sel.NodeSelectorTerms) > 0 }

// matches says whether node matches sel the way the scheduler reads a
// required node affinity: terms are ORed, the requirements of a term
// ANDed, and an empty or invalid term matches nothing.
func matches(sel *corev1.NodeSelector, node *corev1.Node) bool {
	ok, _ := nodeaffinity.NewLazyErrorNodeSelector(sel).Match(node)
	return ok
}
