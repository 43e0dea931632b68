package remotenamespace

import (
	"context"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/fabric/network"
	"github.com/kubectl-offload/kubectl-offload/internal/ipam"
)

// NetworkPolicyName is the NetworkPolicy of a twin namespace that keeps
// out the pods of other tenants.
const NetworkPolicyName = "offload-tenant-isolation"

// tenantAddresses are the addresses that belong to one tenant's traffic on
// this cluster.
type tenantAddresses struct {
	// local are this cluster's pod CIDRs, where the tenant's pods here run.
	local []string
	// consumer are where the consumer's own pods appear from here: the
	// fabric's views of its pod CIDRs, and the admin's flat-network ranges;
	// and the consumer's views of this cluster's pods, which the gateway
	// mirrors to the tenant's pods here (from the caller's view).
	consumer []string
}

// addressesOf returns the addresses of tenant: r.PodCIDRs and r.FlatCIDRs,
// and, when the network fabric serves the tenant, the pod CIDRs of its
// server Tunnel, the views of the consumer's pod CIDRs there and the
// mirrored views of this cluster's.
func (r *Reconciler) addressesOf(ctx context.Context, tenant *offloadv1alpha1.Tenant) (tenantAddresses, error) {
	var local, consumer []string
	for _, p := range r.PodCIDRs {
		local = append(local, p.String())
	}
	for _, p := range r.FlatCIDRs {
		consumer = append(consumer, p.String())
	}
	var tunnel offloadv1alpha1.Tunnel
	key := client.ObjectKey{Namespace: r.Namespace, Name: offloadv1alpha1.TunnelName(offloadv1alpha1.TunnelServer, tenant.Name)}
	err := r.Client.Get(ctx, key, &tunnel)
	if client.IgnoreNotFound(err) != nil {
		return tenantAddresses{}, err
	}
	if err == nil && tunnel.Spec.ClusterID == tenant.Spec.ClusterID {
		local = append(local, tunnel.Spec.LocalPodCIDRs...)
		for _, m := range tunnel.RoutedViews() {
			consumer = append(consumer, m.View)
		}
	}
	return tenantAddresses{local: ipam.CanonicalCIDRs(local), consumer: ipam.CanonicalCIDRs(consumer)}, nil
}

// endpointCIDRs is the value of AnnotationEndpointCIDRs: every address of
// the tenant's traffic.
func (a tenantAddresses) endpointCIDRs() string {
	return strings.Join(ipam.CanonicalCIDRs(append(slices.Clone(a.local), a.consumer...)), ",")
}

// NetworkPolicyFor returns the NetworkPolicy of a twin namespace of the
// tenant with cluster ID tenantID, whose consumer's pods appear from
// consumerCIDRs. Its pods take connections from this cluster's own
// namespaces (those of no tenant), from the tenant's twin namespaces, and
// from the consumer's pods; not from other tenants' pods. They open
// connections to DNS (port 53, wherever the cluster serves it), to the
// tenant's twin namespaces, to the consumer's pods (through the tunnel) and
// to public addresses (PrivateRanges and publicHosts excepted); not to
// this cluster's nodes or API server (publicHosts are their addresses
// outside PrivateRanges, see PublicHosts), its other pods or the cloud's
// metadata service. It holds where the cluster's network plugin enforces
// NetworkPolicy.
func NetworkPolicyFor(tenantID string, consumerCIDRs, publicHosts []string) networkingv1.NetworkPolicySpec {
	tenant := networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{offloadv1alpha1.LabelTenant: tenantID}}}
	from := []networkingv1.NetworkPolicyPeer{
		{NamespaceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: offloadv1alpha1.LabelTenant, Operator: metav1.LabelSelectorOpDoesNotExist}}}},
		tenant,
	}
	to := []networkingv1.NetworkPolicyPeer{tenant,
		{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: slices.Concat(PrivateRanges, publicHosts)}}}
	for _, c := range consumerCIDRs {
		from = append(from, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: c}})
		to = append(to, networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: c}})
	}
	udp, tcp := corev1.ProtocolUDP, corev1.ProtocolTCP
	dns := intstr.FromInt32(53)
	return networkingv1.NetworkPolicySpec{
		PodSelector: metav1.LabelSelector{},
		PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress},
		Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: from}},
		Egress: []networkingv1.NetworkPolicyEgressRule{
			{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: &dns}, {Protocol: &tcp, Port: &dns}}},
			{To: to},
		},
	}
}

// PrivateRanges are the addresses a tenant's pods may not open connections
// to unless another rule lets them: RFC 1918 and RFC 6598 (where a
// cluster's nodes, pods, Services and API server live), link-local (the
// cloud's metadata service) and loopback.
var PrivateRanges = []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "169.254.0.0/16", "127.0.0.0/8"}

// privatePrefixes are PrivateRanges, parsed once: PublicHosts runs on
// every node event.
var privatePrefixes = func() []netip.Prefix {
	out := make([]netip.Prefix, len(PrivateRanges))
	for i, r := range PrivateRanges {
		out[i] = netip.MustParsePrefix(r)
	}
	return out
}()

// PublicHosts are the addresses of hosts (this cluster's nodes and API
// server) outside PrivateRanges, sorted: a node's public address, or a
// managed control plane's, is no destination for a tenant's pods either.
func PublicHosts(hosts []netip.Prefix) []string {
	var out []string
	for _, h := range hosts {
		if !slices.ContainsFunc(privatePrefixes, func(r netip.Prefix) bool { return r.Overlaps(h) }) {
			out = append(out, h.String())
		}
	}
	return ipam.CanonicalCIDRs(out)
}

func (r *Reconciler) ensureNetworkPolicy(ctx context.Context, rn *offloadv1alpha1.RemoteNamespace, tenant *offloadv1alpha1.Tenant, a tenantAddresses) error {
	hosts, err := network.HostAddresses(ctx, r.Client, r.APIReader)
	if err != nil {
		return err
	}
	want := &networkingv1.NetworkPolicy{ObjectMeta: managedMeta(rn, NetworkPolicyName, rn.Spec.TargetNamespace),
		Spec: NetworkPolicyFor(tenant.Spec.ClusterID, a.consumer, PublicHosts(hosts))}
	return ensureObject(ctx, r.Client, want, &networkingv1.NetworkPolicy{}, func(have *networkingv1.NetworkPolicy) bool {
		if equality.Semantic.DeepEqual(have.Spec, want.Spec) {
			return false
		}
		have.Spec = want.Spec
		return true
	})
}

// publicAddressesChanged passes the events of nodes whose addresses
// outside PrivateRanges change: the twin namespaces' NetworkPolicies keep
// tenant pods from them. Nodes with private addresses only, the usual
// case, cost no reconcile.
var publicAddressesChanged = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool { return len(publicNodeAddresses(e.Object)) > 0 },
	DeleteFunc: func(e event.DeleteEvent) bool { return len(publicNodeAddresses(e.Object)) > 0 },
	UpdateFunc: func(e event.UpdateEvent) bool {
		return !slices.Equal(publicNodeAddresses(e.ObjectOld), publicNodeAddresses(e.ObjectNew))
	},
	GenericFunc: func(event.GenericEvent) bool { return false },
}

func publicNodeAddresses(o client.Object) []string {
	n, ok := o.(*corev1.Node)
	if !ok {
		return nil
	}
	var hosts []netip.Prefix
	for _, a := range n.Status.Addresses {
		if ip, err := netip.ParseAddr(a.Address); err == nil && ip.Is4() {
			hosts = append(hosts, netip.PrefixFrom(ip, 32))
		}
	}
	return PublicHosts(hosts)
}

// requestsOfTunnel maps a server Tunnel, whose views bound the tenant's
// EndpointSlices and NetworkPolicies, to the RemoteNamespaces of its tenant.
func (r *Reconciler) requestsOfTunnel(ctx context.Context, o client.Object) []reconcile.Request {
	t, ok := o.(*offloadv1alpha1.Tunnel)
	if !ok || t.Spec.Role != offloadv1alpha1.TunnelServer || t.Spec.ClusterName == "" {
		return nil
	}
	return r.requestsIn(ctx, offloadv1alpha1.TenantNamespacePrefix+t.Spec.ClusterName)
}
