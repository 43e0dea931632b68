package remotenamespace

import (
	"context"
	"net/netip"
	"slices"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// endpointCIDRs is the value of a tenant's twin namespaces'
// AnnotationEndpointCIDRs: r.EndpointCIDRs (this cluster's pod CIDRs and
// what its admin added), and, when the network fabric serves the tenant,
// the pod CIDRs of its server Tunnel and the views of the consumer's pod
// CIDRs there. Sorted and without repeats, so that it changes only when
// one of them does.
func (r *Reconciler) endpointCIDRs(ctx context.Context, tenant *offloadv1alpha1.Tenant) (string, error) {
	set := map[string]bool{}
	for _, p := range r.EndpointCIDRs {
		set[p.Masked().String()] = true
	}
	var tunnel offloadv1alpha1.Tunnel
	key := client.ObjectKey{Namespace: r.Namespace, Name: offloadv1alpha1.TunnelName(offloadv1alpha1.TunnelServer, tenant.Name)}
	err := r.Client.Get(ctx, key, &tunnel)
	if client.IgnoreNotFound(err) != nil {
		return "", err
	}
	if err == nil && tunnel.Spec.ClusterID == tenant.Spec.ClusterID {
		cidrs := slices.Clone(tunnel.Spec.LocalPodCIDRs)
		for _, m := range tunnel.Spec.Mappings {
			cidrs = append(cidrs, m.View)
		}
		for _, c := range cidrs {
			if p, err := netip.ParsePrefix(c); err == nil {
				set[p.Masked().String()] = true
			}
		}
	}
	out := make([]string, 0, len(set))
	for c := range set {
		out = append(out, c)
	}
	slices.Sort(out)
	return strings.Join(out, ","), nil
}

// requestsOfTunnel maps a server Tunnel, whose views bound what the
// tenant's EndpointSlices may hold, to the RemoteNamespaces of its tenant.
func (r *Reconciler) requestsOfTunnel(ctx context.Context, o client.Object) []reconcile.Request {
	t, ok := o.(*offloadv1alpha1.Tunnel)
	if !ok || t.Spec.Role != offloadv1alpha1.TunnelServer || t.Spec.ClusterName == "" {
		return nil
	}
	return r.requestsIn(ctx, offloadv1alpha1.TenantNamespacePrefix+t.Spec.ClusterName)
}
