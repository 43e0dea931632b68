package network

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/manager"
	"github.com/kubectl-offload/kubectl-offload/internal/ipam"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// ProviderControllerName names the provider side's controller.
const ProviderControllerName = "network-provider"

// ProviderReconciler answers each consumer's NetworkPeering: it runs the
// server Tunnel in-CONSUMER and its gateway, publishes the gateway, and
// writes back its key, endpoint, pod CIDRs, its view of the consumer and
// the MTU both use. The gateway's tenant filter lets the consumer reach
// only the pods of its twin namespaces.
type ProviderReconciler struct {
	Client client.Client
	// Reader reads Secrets and ConfigMaps of the install namespace uncached.
	Reader   client.Reader
	Settings Settings

	// pods holds the pods the answers read, and no other (tenantPodCache).
	pods cache.Cache
}

// tenantPodCache returns a cache of the pods a provider's answers read: the
// consumers' pods, in their twin namespaces (every pod a consumer sends
// carries label LabelOriginPodUID; one without it is left out of the
// tenant filter, which lets nothing reach it), and the gateways' pods in
// the agent's namespace. Not the provider's own pods: the manager's cache
// would hold every pod of the cluster, and their events would cost the
// agent about a millisecond each.
func tenantPodCache(mgr ctrl.Manager, namespace string) (cache.Cache, error) {
	selector := func(key string) labels.Selector {
		req, err := labels.NewRequirement(key, selection.Exists, nil)
		if err != nil {
			panic(err) // the keys are constants
		}
		return labels.NewSelector().Add(*req)
	}
	c, err := cache.New(mgr.GetConfig(), cache.Options{
		HTTPClient: mgr.GetHTTPClient(),
		Scheme:     mgr.GetScheme(),
		Mapper:     mgr.GetRESTMapper(),
		ByObject: map[client.Object]cache.ByObject{&corev1.Pod{}: {
			Transform: manager.SlimPod,
			Namespaces: map[string]cache.Config{
				namespace:           {LabelSelector: selector(offloadv1alpha1.LabelTunnel)},
				cache.AllNamespaces: {LabelSelector: selector(offloadv1alpha1.LabelOriginPodUID)},
			},
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("creating the cache of the consumers' and gateways' pods: %w", err)
	}
	if err := mgr.Add(c); err != nil {
		return nil, fmt.Errorf("adding the cache of the consumers' and gateways' pods: %w", err)
	}
	return c, nil
}

// SetupWithManager registers the controller.
func (r *ProviderReconciler) SetupWithManager(mgr ctrl.Manager) error {
	pods, err := tenantPodCache(mgr, r.Settings.Namespace)
	if err != nil {
		return fmt.Errorf("setting up the %s controller: %w", ProviderControllerName, err)
	}
	r.pods = pods
	err = ctrl.NewControllerManagedBy(mgr).
		Named(ProviderControllerName).
		For(&offloadv1alpha1.NetworkPeering{}).
		// A Tunnel whose NetworkPeering went while the agent was down is
		// found at start; its gateway's state wakes the answer.
		Watches(&offloadv1alpha1.Tunnel{}, handler.EnqueueRequestsFromMapFunc(r.peeringOfTunnel)).
		WatchesRawSource(source.Kind(pods, client.Object(&corev1.Pod{}), handler.EnqueueRequestsFromMapFunc(r.peeringOfPod), podAddressChanged())).
		Watches(&corev1.Service{}, handler.EnqueueRequestsFromMapFunc(r.peeringOfTunnelObject)).
		Complete(r)
	if err != nil {
		return fmt.Errorf("setting up the %s controller: %w", ProviderControllerName, err)
	}
	return nil
}

// podAddressChanged lets through the pod updates that can change a
// NetworkPeering's answer: a twin pod's addresses, a gateway pod's node,
// address or labels, a deletion; not the other status updates, most of a
// pod's events, each of which would list every pod of the consumer's twin
// namespaces.
func podAddressChanged() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			old, okOld := e.ObjectOld.(*corev1.Pod)
			cur, okNew := e.ObjectNew.(*corev1.Pod)
			if !okOld || !okNew {
				return true
			}
			return old.Spec.NodeName != cur.Spec.NodeName || old.Status.Phase != cur.Status.Phase ||
				!slices.Equal(old.Status.PodIPs, cur.Status.PodIPs) || old.Status.PodIP != cur.Status.PodIP ||
				old.DeletionTimestamp.IsZero() != cur.DeletionTimestamp.IsZero() || !maps.Equal(old.Labels, cur.Labels)
		},
	}
}

// peeringOfTunnel maps a server Tunnel to its consumer's NetworkPeering.
func (r *ProviderReconciler) peeringOfTunnel(_ context.Context, o client.Object) []reconcile.Request {
	t, ok := o.(*offloadv1alpha1.Tunnel)
	if !ok || t.Namespace != r.Settings.Namespace || t.Spec.Role != offloadv1alpha1.TunnelServer {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{
		Namespace: offloadv1alpha1.TenantNamespace(t.Spec.ClusterName), Name: offloadv1alpha1.NetworkPeeringName}}}
}

// peeringOfTunnelObject maps a gateway's object to its NetworkPeering.
func (r *ProviderReconciler) peeringOfTunnelObject(_ context.Context, o client.Object) []reconcile.Request {
	tunnel := o.GetLabels()[offloadv1alpha1.LabelTunnel]
	consumer, ok := strings.CutPrefix(tunnel, "in-")
	if o.GetNamespace() != r.Settings.Namespace || !ok {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: offloadv1alpha1.TenantNamespace(consumer), Name: offloadv1alpha1.NetworkPeeringName}}}
}

// peeringOfPod maps a pod of a twin namespace (its allowed address) or of
// a server gateway (its node is the endpoint) to the NetworkPeering.
func (r *ProviderReconciler) peeringOfPod(ctx context.Context, o client.Object) []reconcile.Request {
	if reqs := r.peeringOfTunnelObject(ctx, o); len(reqs) > 0 {
		return reqs
	}
	var ns corev1.Namespace
	if err := r.Client.Get(ctx, client.ObjectKey{Name: o.GetNamespace()}, &ns); err != nil {
		return nil
	}
	id := ns.Labels[offloadv1alpha1.LabelTenant]
	if id == "" || strings.HasPrefix(ns.Name, offloadv1alpha1.TenantNamespacePrefix) {
		return nil
	}
	var peerings offloadv1alpha1.NetworkPeeringList
	if err := r.Client.List(ctx, &peerings); err != nil {
		return nil
	}
	var out []reconcile.Request
	for _, np := range peerings.Items {
		if np.Spec.ClusterID == id {
			out = append(out, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&np)})
		}
	}
	return out
}

// Reconcile answers one NetworkPeering, or removes the Tunnel of one that
// went.
func (r *ProviderReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := klog.FromContext(ctx)
	consumer, ok := strings.CutPrefix(req.Namespace, offloadv1alpha1.TenantNamespacePrefix)
	if !ok || req.Name != offloadv1alpha1.NetworkPeeringName {
		return reconcile.Result{}, nil // not a tenant's: never served
	}
	tunnel := &offloadv1alpha1.Tunnel{ObjectMeta: metav1.ObjectMeta{Namespace: r.Settings.Namespace, Name: offloadv1alpha1.TunnelName(offloadv1alpha1.TunnelServer, consumer)}}
	var np offloadv1alpha1.NetworkPeering
	err := r.Client.Get(ctx, req.NamespacedName, &np)
	if apierrors.IsNotFound(err) || err == nil && !np.DeletionTimestamp.IsZero() {
		// The consumer unpeered (its tenant namespace went) or withdrew:
		// the gateway and everything it owns go with the Tunnel.
		if err := r.Client.Delete(ctx, tunnel); client.IgnoreNotFound(err) != nil {
			return reconcile.Result{}, fmt.Errorf("deleting Tunnel %s: %w", klog.KObj(tunnel), err)
		} else if err == nil {
			log.Info("Removed the gateway of a consumer that left", "tunnel", klog.KObj(tunnel))
		}
		return reconcile.Result{}, nil
	}
	if err != nil {
		return reconcile.Result{}, err
	}

	ready, err := r.serve(ctx, &np, consumer, tunnel)
	if err != nil {
		ready = metav1.Condition{Status: metav1.ConditionFalse, Reason: "Failed", Message: err.Error()}
	}
	ready.Type, ready.ObservedGeneration = offloadv1alpha1.ConditionReady, np.Generation
	meta.SetStatusCondition(&np.Status.Conditions, ready)
	if serr := r.Client.Status().Update(ctx, &np); apierrors.IsConflict(serr) {
		return reconcile.Result{RequeueAfter: time.Second}, nil // the consumer changed it meanwhile
	} else if serr != nil {
		return reconcile.Result{}, fmt.Errorf("writing the status of NetworkPeering %s: %w", klog.KObj(&np), serr)
	}
	if err != nil {
		log.Error(err, "Serving the network peering", "networkPeering", klog.KObj(&np))
	}
	return reconcile.Result{}, r.record(ctx, tunnel, refusedHere(ready, &np, consumer))
}

// refusedHere is what the provider shows of a refused announcement: its
// own refusal of the consumer's (ready), or the consumer's refusal of its
// own, from the NetworkPeering's annotation, which the consumer wrote and
// is cleaned before it is shown. Nil when neither side refuses.
func refusedHere(ready metav1.Condition, np *offloadv1alpha1.NetworkPeering, consumer string) *metav1.Condition {
	if ready.Status == metav1.ConditionFalse && isRefusal(ready.Reason) {
		c := ready
		return &c
	}
	if v := np.Annotations[AnnotationRefusedAnnouncement]; v != "" {
		return &metav1.Condition{Status: metav1.ConditionFalse, Reason: ReasonRefusedByConsumer,
			Message: "consumer " + consumer + " refuses what this cluster announced, and routes none of it: " + peering.CleanText(v)}
	}
	return nil
}

// record reports the consumer's network on the server Tunnel, phase and
// NetworkReady, which the ForeignCluster of the consumer here mirrors: the
// refusal of an announcement, when one side refuses, else what the
// gateway reports. A Tunnel serve could not write (no Tunnel yet) has no
// report.
func (r *ProviderReconciler) record(ctx context.Context, tunnel *offloadv1alpha1.Tunnel, refused *metav1.Condition) error {
	if tunnel.UID == "" {
		return nil
	}
	if refused != nil {
		return recordNetwork(ctx, r.Client, tunnel, offloadv1alpha1.PhaseFailed, *refused)
	}
	phase, c, _ := tunnelPhase(tunnel)
	return recordNetwork(ctx, r.Client, tunnel, phase, c)
}

// serve brings the Tunnel, the gateway and the NetworkPeering's status in
// line, and says how ready the answer is.
func (r *ProviderReconciler) serve(ctx context.Context, np *offloadv1alpha1.NetworkPeering, consumer string, tunnel *offloadv1alpha1.Tunnel) (metav1.Condition, error) {
	// The consumer's Tenant owns the Tunnel: when the tenant goes, even
	// while this agent is down, the gateway goes too.
	var tenant offloadv1alpha1.Tenant
	if err := r.Client.Get(ctx, client.ObjectKey{Name: consumer}, &tenant); err != nil {
		return metav1.Condition{}, fmt.Errorf("reading the Tenant of consumer %s: %w", consumer, err)
	}
	if tenant.Spec.ClusterID != np.Spec.ClusterID {
		return metav1.Condition{Status: metav1.ConditionFalse, Reason: "InvalidSpec",
			Message: fmt.Sprintf("clusterID %s is not the one of this tenant", np.Spec.ClusterID)}, nil
	}
	allowed, err := r.tenantPods(ctx, np.Spec.ClusterID)
	if err != nil {
		return metav1.Condition{}, err
	}
	// The Tunnel exists from the first answer, refused or not: the
	// network's report on it is what the consumer's ForeignCluster here
	// shows. Until an announcement is accepted it has no peer, so no
	// gateway.
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(tunnel), tunnel); client.IgnoreNotFound(err) != nil {
		return metav1.Condition{}, err
	}
	if tunnel.UID == "" {
		spec := offloadv1alpha1.TunnelSpec{ClusterID: np.Spec.ClusterID, ClusterName: consumer, Role: offloadv1alpha1.TunnelServer,
			LocalPodCIDRs: r.Settings.podCIDRStrings(), AllowedDestinations: allowed}
		if err := applyTunnelOwned(ctx, r.Client, tunnel, spec, &tenant); err != nil {
			return metav1.Condition{}, err
		}
	}
	if err := validSpec(np.Spec); err != nil {
		return metav1.Condition{Status: metav1.ConditionFalse, Reason: "InvalidSpec", Message: err.Error()}, nil
	}
	if bad := r.Settings.checkPeerCIDRs(tunnel, np.Spec.PodCIDRs, "consumer "+consumer); bad != nil {
		return metav1.Condition{Status: metav1.ConditionFalse, Reason: bad.reason, Message: bad.message}, nil
	}
	mappings, allocated, err := views(ctx, r.Reader, r.Settings, tunnel, np.Spec.PodCIDRs)
	if err != nil {
		return metav1.Condition{Status: metav1.ConditionFalse, Reason: "NoFreeView", Message: err.Error()}, nil
	}
	defer allocated() // on the way out before the Tunnel is written
	spec := offloadv1alpha1.TunnelSpec{
		ClusterID: np.Spec.ClusterID, ClusterName: consumer, Role: offloadv1alpha1.TunnelServer,
		PeerPublicKey: np.Spec.PublicKey, MTU: agreedMTU(np.Spec.MTU, tunnel.Status.PathMTU),
		LocalPodCIDRs: r.Settings.podCIDRStrings(), Mappings: mappings, AllowedDestinations: allowed,
	}
	spec.PeerViews = tunnel.Spec.PeerViews // mirror's to change
	err = applyTunnelOwned(ctx, r.Client, tunnel, spec, &tenant)
	allocated()
	if err != nil {
		return metav1.Condition{}, err
	}
	mirrored, err := r.mirror(ctx, tunnel, np.Spec.ProviderViews)
	if err != nil {
		return metav1.Condition{}, err
	}
	pub, err := gatewayKey(ctx, r.Client, r.Reader, r.Settings.Namespace, tunnel.Name, tunnel)
	if err != nil {
		return metav1.Condition{}, err
	}
	if err := ensureGateway(ctx, r.Client, r.Reader, tunnel); err != nil {
		return metav1.Condition{}, err
	}
	svc, err := ensureService(ctx, r.Client, tunnel, r.Settings.GatewayServiceType)
	if err != nil {
		return metav1.Condition{}, err
	}
	np.Status.PublicKey, np.Status.PodCIDRs, np.Status.MTU = pub, r.Settings.podCIDRStrings(), spec.MTU
	np.Status.ConsumerViews = mappings
	endpoint, why := r.endpoint(ctx, tunnel, svc)
	np.Status.Endpoint = endpoint
	if endpoint == "" {
		return metav1.Condition{Status: metav1.ConditionFalse, Reason: "NoEndpoint", Message: why}, nil
	}
	return metav1.Condition{Status: metav1.ConditionTrue, Reason: "Served",
		Message: fmt.Sprintf("the gateway listens at %s and sees the consumer's pods as %s; %s", endpoint, describe(mappings), mirrored)}, nil
}

// mirror keeps the server Tunnel's peerViews, which its gateway mirrors:
// the consumer's views of this cluster's pods (announced) when they pass
// checkMirror, else none. It says which, for the answer's message. The
// allocation lock makes the check and the write one step against the
// views other Tunnels take meanwhile. Views already mirrored are kept
// without a new check, as views are: every view allocated since stayed
// clear of them, and the serve that each twin pod's new address brings
// lists no Tunnel and no node.
func (r *ProviderReconciler) mirror(ctx context.Context, tunnel *offloadv1alpha1.Tunnel, announced []offloadv1alpha1.CIDRMapping) (string, error) {
	const mirroring = "its pods reach each other at the consumer's addresses of them, "
	if len(announced) > 0 && slices.Equal(announced, tunnel.Spec.PeerViews) && !overlapping(viewPrefixes(announced), viewPrefixes(tunnel.Spec.Mappings)) {
		return mirroring + describeViews(announced), nil
	}
	allocation.Lock()
	defer allocation.Unlock()
	views, why, err := r.checkMirror(ctx, tunnel, announced)
	if err != nil {
		return "", err
	}
	if !slices.Equal(tunnel.Spec.PeerViews, views) {
		spec := *tunnel.Spec.DeepCopy()
		spec.PeerViews = views
		if err := applyTunnel(ctx, r.Client, tunnel, spec); err != nil {
			return "", err
		}
	}
	if views == nil {
		return "its pods do not reach each other at the consumer's addresses: " + why, nil
	}
	return mirroring + describeViews(views), nil
}

// checkMirror checks the consumer's views of this cluster's pods, hostile
// input that becomes routes on every node here and addresses the gateway
// translates: one view of each local pod CIDR, of its size, within the
// ranges accepted from peers and this cluster's remap pools (both sides
// use the same default pool), and clear of everything this cluster uses
// (its pod, service, node and reserved ranges, every Tunnel's views, the
// other consumers' mirrors). It returns them, canonical, or why not.
func (r *ProviderReconciler) checkMirror(ctx context.Context, self *offloadv1alpha1.Tunnel, announced []offloadv1alpha1.CIDRMapping) ([]offloadv1alpha1.CIDRMapping, string, error) {
	if len(announced) == 0 {
		return nil, "the consumer announced no view of them", nil
	}
	if bad := r.Settings.checkPeerViews(announced, "the consumer"); bad != nil {
		return nil, bad.message, nil
	}
	var views []string
	for _, m := range announced {
		views = append(views, m.View)
	}
	if err := r.Settings.PeerRanges.Check(views); err != nil {
		return nil, "the consumer's views are refused: " + err.Error(), nil
	}
	var tunnels offloadv1alpha1.TunnelList
	if err := r.Reader.List(ctx, &tunnels, client.InNamespace(r.Settings.Namespace)); err != nil {
		return nil, "", fmt.Errorf("listing Tunnels: %w", err)
	}
	taken := routedViews(tunnels.Items, self.Name)
	taken = append(taken, viewPrefixes(self.Spec.Mappings)...)
	host, err := HostAddresses(ctx, r.Reader, r.Reader)
	if err != nil {
		return nil, "", err
	}
	space := r.Settings.space(taken, host)
	out := make([]offloadv1alpha1.CIDRMapping, 0, len(announced))
	for _, m := range announced {
		real, view := netip.MustParsePrefix(m.Real).Masked(), netip.MustParsePrefix(m.View).Masked()
		// Like every view routed here, a mirror lies in the ranges this
		// cluster set aside for views, never in one its hosts may use.
		if !space.InPools(view) {
			return nil, fmt.Sprintf("the consumer's view %v of the pods %v is outside this cluster's remap pools (%s), the only ranges it routes to peers", view, real, ipam.Join(r.Settings.Pools)), nil
		}
		if c, clash := space.Clash(view); clash {
			return nil, fmt.Sprintf("the consumer's view %v of the pods %v overlaps %v, which this cluster uses (a peering made before views were kept apart keeps them until it is made again)", view, real, c), nil
		}
		space.Taken = append(space.Taken, view)
		out = append(out, offloadv1alpha1.CIDRMapping{Real: real.String(), View: view.String()})
	}
	return out, "", nil
}

// applyTunnel creates the Tunnel or updates its spec.
func applyTunnel(ctx context.Context, c client.Client, t *offloadv1alpha1.Tunnel, spec offloadv1alpha1.TunnelSpec) error {
	if t.UID == "" {
		t.Spec = spec
		t.Labels = map[string]string{offloadv1alpha1.LabelRemoteClusterID: spec.ClusterID}
		if err := c.Create(ctx, t); err != nil {
			return fmt.Errorf("creating Tunnel %s: %w", klog.KObj(t), err)
		}
		return nil
	}
	if equalSpec(t.Spec, spec) {
		return nil
	}
	t.Spec = spec
	if err := c.Update(ctx, t); err != nil {
		return fmt.Errorf("updating Tunnel %s: %w", klog.KObj(t), err)
	}
	return nil
}

func equalSpec(a, b offloadv1alpha1.TunnelSpec) bool {
	return a.ClusterID == b.ClusterID && a.ClusterName == b.ClusterName && a.Role == b.Role && a.PeerPublicKey == b.PeerPublicKey &&
		a.Endpoint == b.Endpoint && a.MTU == b.MTU && slices.Equal(a.LocalPodCIDRs, b.LocalPodCIDRs) &&
		slices.Equal(a.Mappings, b.Mappings) && slices.Equal(a.PeerViews, b.PeerViews) && slices.Equal(a.AllowedDestinations, b.AllowedDestinations)
}

// agreedMTU is the smaller of the two sides' path MTUs, once both are
// known; 0 until then (each gateway uses its own path's).
func agreedMTU(a, b int32) int32 {
	if a == 0 || b == 0 {
		return 0
	}
	return min(a, b)
}

// tenantPods are the addresses of the pods in the consumer's twin
// namespaces: what its traffic may reach here, and the only sources that
// may open connections into its tunnel.
func (r *ProviderReconciler) tenantPods(ctx context.Context, consumerID string) ([]string, error) {
	var namespaces corev1.NamespaceList
	if err := r.Client.List(ctx, &namespaces, client.MatchingLabels{offloadv1alpha1.LabelTenant: consumerID}); err != nil {
		return nil, fmt.Errorf("listing the consumer's twin namespaces: %w", err)
	}
	var twins []string
	for _, ns := range namespaces.Items {
		if !strings.HasPrefix(ns.Name, offloadv1alpha1.TenantNamespacePrefix) {
			twins = append(twins, ns.Name)
		}
	}
	anyIPv4 := func(p *corev1.Pod) []string { return podIPs(p, func(netip.Addr) bool { return true }) }
	return r.Settings.allowList(ctx, r.pods, twins, anyIPv4)
}

// endpoint is where the consumer dials the gateway: the configured
// address, else the load balancer's, else the NodePort on the gateway
// pod's node. It says why when there is none yet.
func (r *ProviderReconciler) endpoint(ctx context.Context, t *offloadv1alpha1.Tunnel, svc *corev1.Service) (string, string) {
	port := svc.Spec.Ports[0].NodePort
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		port = svc.Spec.Ports[0].Port
	}
	if a := r.Settings.GatewayAddress; a != "" {
		if _, _, err := net.SplitHostPort(a); err == nil {
			return a, ""
		}
		return net.JoinHostPort(a, strconv.Itoa(int(port))), ""
	}
	if svc.Spec.Type == corev1.ServiceTypeLoadBalancer {
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if host := cmp.Or(in.IP, in.Hostname); host != "" {
				return net.JoinHostPort(host, strconv.Itoa(int(port))), ""
			}
		}
		return "", fmt.Sprintf("waiting for a load balancer address for Service %s (or give the address consumers reach with kubectl offload upgrade --gateway-address HOST[:PORT])", klog.KObj(svc))
	}
	if port == 0 {
		return "", fmt.Sprintf("Service %s has no NodePort yet", klog.KObj(svc))
	}
	var pods corev1.PodList
	if err := r.pods.List(ctx, &pods, client.InNamespace(t.Namespace), client.MatchingLabels(gatewayLabels(t.Name))); err != nil {
		return "", err.Error()
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" || !p.DeletionTimestamp.IsZero() {
			continue
		}
		var node corev1.Node
		if err := r.Client.Get(ctx, client.ObjectKey{Name: p.Spec.NodeName}, &node); err != nil {
			continue
		}
		if addr := nodeAddress(&node); addr != "" {
			return net.JoinHostPort(addr, strconv.Itoa(int(port))), ""
		}
	}
	return "", "waiting for the gateway pod to be scheduled: its node's address is the endpoint"
}

// nodeAddress prefers the node's external address.
func nodeAddress(n *corev1.Node) string {
	for _, typ := range []corev1.NodeAddressType{corev1.NodeExternalIP, corev1.NodeInternalIP} {
		for _, a := range n.Status.Addresses {
			if a.Type == typ && a.Address != "" {
				return a.Address
			}
		}
	}
	return ""
}

// validSpec checks what the consumer wrote.
func validSpec(s offloadv1alpha1.NetworkPeeringSpec) error {
	var errs []error
	if _, err := wgtypes.ParseKey(s.PublicKey); err != nil {
		errs = append(errs, fmt.Errorf("publicKey: %w", err))
	}
	return errors.Join(errs...)
}

// overlapping tells whether a prefix of a overlaps one of b.
func overlapping(a, b []netip.Prefix) bool {
	for _, p := range a {
		for _, q := range b {
			if p.Overlaps(q) {
				return true
			}
		}
	}
	return false
}

// describeViews is "VIEW for REAL, …".
func describeViews(ms []offloadv1alpha1.CIDRMapping) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = m.View + " for " + m.Real
	}
	return strings.Join(parts, ", ")
}

func describe(ms []offloadv1alpha1.CIDRMapping) string {
	var parts []string
	for _, m := range ms {
		if m.Real == m.View {
			parts = append(parts, m.Real)
		} else {
			parts = append(parts, m.View+" (real "+m.Real+")")
		}
	}
	return strings.Join(parts, ", ")
}
