package network

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// FilterControllerName names the controller of the consumer's filter.
const FilterControllerName = "network-consumer-filter"

// LabelPeerReachable, set to "true" on a consumer namespace that is not
// offloaded, lets the providers' pods open connections to its pods through
// the tunnel. Offloaded namespaces are reachable without it.
const LabelPeerReachable = "offload.io/peer-reachable"

// ConsumerFilterReconciler keeps the consumer's filter on each of its
// Tunnels (spec.allowedDestinations): the provider's pods may open
// connections through the tunnel only to this cluster's pods of offloaded
// namespaces (and of namespaces labelled LabelPeerReachable), never to
// the rest of the cluster, its agent included. ConsumerReconciler writes
// the same list when it writes the Tunnel; this controller follows the
// pods as they come and go between its polls.
type ConsumerFilterReconciler struct {
	Client   client.Client
	Settings Settings

	// skipNameValidation lets tests start the controller more than once
	// in a process.
	skipNameValidation bool

	// watchPods starts the watch of this cluster's pods, once: at the first
	// client Tunnel, so that a cluster that only provides never watches
	// its pods (its own pods cost the agent nothing).
	watchPods func() error
}

// SetupWithManager registers the controller: it watches the client
// Tunnels and the namespaces' labels, and, once there is a client Tunnel,
// the pods of this cluster's pod CIDRs.
func (r *ConsumerFilterReconciler) SetupWithManager(mgr ctrl.Manager) error {
	all := handler.EnqueueRequestsFromMapFunc(r.clientTunnels)
	c, err := ctrl.NewControllerManagedBy(mgr).
		Named(FilterControllerName).
		WithOptions(controller.Options{SkipNameValidation: &r.skipNameValidation}).
		For(&offloadv1alpha1.Tunnel{}, builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
			t, ok := o.(*offloadv1alpha1.Tunnel)
			return ok && t.Spec.Role == offloadv1alpha1.TunnelClient
		}))).
		Watches(&corev1.Namespace{}, all, builder.WithPredicates(reachabilityChanged)).
		Build(r)
	if err != nil {
		return fmt.Errorf("setting up the %s controller: %w", FilterControllerName, err)
	}
	pods := source.Kind(mgr.GetCache(), client.Object(&corev1.Pod{}), all, r.localPodChanged())
	r.watchPods = sync.OnceValue(func() error { return c.Watch(pods) })
	return nil
}

// Reconcile writes the filter of one Tunnel of the agent's namespace.
func (r *ConsumerFilterReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if req.Namespace != r.Settings.Namespace {
		return reconcile.Result{}, nil
	}
	var t offloadv1alpha1.Tunnel
	if err := r.Client.Get(ctx, req.NamespacedName, &t); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if t.Spec.Role != offloadv1alpha1.TunnelClient || !t.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	// Watched from before the list below: no change of a pod falls between.
	if r.watchPods != nil {
		if err := r.watchPods(); err != nil {
			return reconcile.Result{}, fmt.Errorf("watching this cluster's pods for the filter of Tunnel %s: %w", klog.KObj(&t), err)
		}
	}
	allowed, err := r.Settings.reachablePods(ctx, r.Client)
	if err != nil {
		return reconcile.Result{}, err
	}
	if slices.Equal(t.Spec.AllowedDestinations, allowed) {
		return reconcile.Result{}, nil
	}
	t.Spec.AllowedDestinations = allowed
	if err := r.Client.Update(ctx, &t); err != nil {
		return reconcile.Result{}, fmt.Errorf("updating the filter of Tunnel %s: %w", klog.KObj(&t), err)
	}
	return reconcile.Result{}, nil
}

// clientTunnels maps any change to every client Tunnel.
func (r *ConsumerFilterReconciler) clientTunnels(ctx context.Context, _ client.Object) []reconcile.Request {
	var list offloadv1alpha1.TunnelList
	if err := r.Client.List(ctx, &list, client.InNamespace(r.Settings.Namespace)); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing Tunnels")
		return nil
	}
	var reqs []reconcile.Request
	for _, t := range list.Items {
		if t.Spec.Role == offloadv1alpha1.TunnelClient {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&t)})
		}
	}
	return reqs
}

// localPodChanged passes the events of pods that have, or had, an address
// in this cluster's pod CIDRs: pods on virtual nodes (whose addresses are
// views of a provider's) and hostNetwork pods never change the filter.
func (r *ConsumerFilterReconciler) localPodChanged() predicate.Funcs {
	local := func(o client.Object) bool {
		p, ok := o.(*corev1.Pod)
		return ok && len(r.Settings.localIPs(p)) > 0
	}
	return predicate.Funcs{
		CreateFunc: func(e event.CreateEvent) bool { return local(e.Object) },
		DeleteFunc: func(e event.DeleteEvent) bool { return local(e.Object) },
		UpdateFunc: func(e event.UpdateEvent) bool {
			a, b := e.ObjectOld.(*corev1.Pod), e.ObjectNew.(*corev1.Pod)
			return (local(a) || local(b)) && !slices.Equal(r.Settings.localIPs(a), r.Settings.localIPs(b))
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// reachabilityChanged passes namespace events that change whether its pods
// are reachable from the providers.
var reachabilityChanged = predicate.Funcs{
	CreateFunc: func(e event.CreateEvent) bool { return reachable(e.Object) },
	DeleteFunc: func(e event.DeleteEvent) bool { return reachable(e.Object) },
	UpdateFunc: func(e event.UpdateEvent) bool { return reachable(e.ObjectOld) != reachable(e.ObjectNew) },
	GenericFunc: func(event.GenericEvent) bool {
		return false
	},
}

// reachable reports whether the providers' pods may reach the pods of
// namespace o: it is offloaded, or opted in.
func reachable(o client.Object) bool {
	l := o.GetLabels()
	return l[offloadv1alpha1.LabelOffloaded] == "true" || l[LabelPeerReachable] == "true"
}

// localIPs are the IPv4 addresses of pod p in this cluster's pod CIDRs, as
// /32 CIDRs.
func (s Settings) localIPs(p *corev1.Pod) []string {
	return podIPs(p, func(a netip.Addr) bool {
		return slices.ContainsFunc(s.PodCIDRs, func(c netip.Prefix) bool { return c.Contains(a) })
	})
}

// podIPs are the IPv4 addresses of pod p that keep accepts, as /32 CIDRs;
// none for a hostNetwork pod, whose address is its node's.
func podIPs(p *corev1.Pod, keep func(netip.Addr) bool) []string {
	if p.Spec.HostNetwork {
		return nil
	}
	var out []string
	for _, ip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil && a.Is4() && keep(a) {
			out = append(out, netip.PrefixFrom(a, 32).String())
		}
	}
	return out
}

// reachablePods lists the addresses of this cluster's pods the providers'
// pods may open connections to: those of reachable namespaces.
func (s Settings) reachablePods(ctx context.Context, c client.Reader) ([]string, error) {
	var namespaces corev1.NamespaceList
	if err := c.List(ctx, &namespaces); err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	var names []string
	for i := range namespaces.Items {
		if reachable(&namespaces.Items[i]) {
			names = append(names, namespaces.Items[i].Name)
		}
	}
	return s.allowList(ctx, c, names, s.localIPs)
}

// allowList is a gateway's tenant filter (Tunnel spec.allowedDestinations):
// the addresses ips gives for the pods of namespaces, sorted. With none,
// the pod CIDR's network address, which no pod has, so that the filter
// lets nothing in (an empty list would let every pod be reached).
func (s Settings) allowList(ctx context.Context, c client.Reader, namespaces []string, ips func(*corev1.Pod) []string) ([]string, error) {
	var out []string
	for _, ns := range namespaces {
		// Read only: no deep copy of every pod of the namespace on each
		// reconcile, which every pod's address change brings.
		var pods corev1.PodList
		if err := c.List(ctx, &pods, client.InNamespace(ns), client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("listing the pods of namespace %s: %w", ns, err)
		}
		for i := range pods.Items {
			out = append(out, ips(&pods.Items[i])...)
		}
	}
	slices.Sort(out)
	out = slices.Compact(out)
	if len(out) == 0 && len(s.PodCIDRs) > 0 {
		out = []string{netip.PrefixFrom(s.PodCIDRs[0].Masked().Addr(), 32).String()}
	}
	return out, nil
}
