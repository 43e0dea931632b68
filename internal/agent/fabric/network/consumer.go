package network

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/providerclient"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/ssa"
	"github.com/kubectl-offload/kubectl-offload/internal/ipam"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// ConsumerControllerName names the consumer side's controller.
const ConsumerControllerName = "network-consumer"

// FieldManager is the field manager of the Tunnels' phase and
// NetworkReady condition: the peering's network as a whole, which the
// ForeignCluster's status mirrors. The gateway writes the rest of the
// Tunnel's status.
const FieldManager = "offload-network"

// How often the consumer looks at its NetworkPeering on the provider, which
// it cannot watch across clusters: often until the tunnel is up and the MTU
// agreed, then to follow changes (a moved endpoint, a new key).
const (
	pollPending     = 5 * time.Second
	pollEstablished = time.Minute
)

// ConsumerReconciler runs the network side of each outgoing peering: it
// asks the provider for the tunnel through the NetworkPeering in its tenant
// namespace, keeps the client Tunnel out-PROVIDER and its gateway, and
// reports the peering's network on the Tunnel (phase and NetworkReady).
type ConsumerReconciler struct {
	Client client.Client
	// Reader reads the identity, the gateway template and the gateway keys
	// uncached: the agent may read those only in its own namespace.
	Reader    client.Reader
	Settings  Settings
	Providers *providerclient.Set
}

// SetupWithManager registers the controller.
func (r *ConsumerReconciler) SetupWithManager(mgr ctrl.Manager) error {
	err := ctrl.NewControllerManagedBy(mgr).
		Named(ConsumerControllerName).
		For(&offloadv1alpha1.ForeignCluster{}).
		Owns(&offloadv1alpha1.Tunnel{}).
		Complete(r)
	if err != nil {
		return fmt.Errorf("setting up the %s controller: %w", ConsumerControllerName, err)
	}
	return nil
}

// Reconcile brings one peering's network in line with its ForeignCluster.
func (r *ConsumerReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var fc offloadv1alpha1.ForeignCluster
	if err := r.Client.Get(ctx, req.NamespacedName, &fc); err != nil {
		// A deleted peering's Tunnel, and with it the gateway, go through
		// the garbage collector: the ForeignCluster owns the Tunnel.
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !fc.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	tunnel := &offloadv1alpha1.Tunnel{ObjectMeta: metav1.ObjectMeta{Namespace: r.Settings.Namespace, Name: offloadv1alpha1.TunnelName(offloadv1alpha1.TunnelClient, fc.Name)}}
	if !fc.Spec.OutgoingPeering.Enabled || fc.Spec.Networking.Disabled {
		// The ForeignCluster's status says networking is disabled, from
		// its spec: there is no Tunnel to report on.
		if err := r.Client.Delete(ctx, tunnel); client.IgnoreNotFound(err) != nil {
			return reconcile.Result{}, fmt.Errorf("deleting Tunnel %s: %w", klog.KObj(tunnel), err)
		}
		return reconcile.Result{}, nil
	}
	spec, err := r.ensureTunnel(ctx, &fc, tunnel)
	if err != nil {
		return reconcile.Result{}, err
	}
	phase, cond, err := r.connect(ctx, &fc, tunnel, spec)
	if err != nil {
		phase, cond = offloadv1alpha1.PhasePending, metav1.Condition{Status: metav1.ConditionFalse, Reason: "Pending", Message: err.Error()}
		klog.FromContext(ctx).V(1).Info("The network peering waits", "foreignCluster", fc.Name, "reason", err.Error())
	}
	if err := recordNetwork(ctx, r.Client, tunnel, phase, cond); err != nil {
		return reconcile.Result{}, err
	}
	// The exchange is over once the tunnel is up and the MTU agreed (the
	// provider agrees it only after both gateways measured their path).
	if phase == offloadv1alpha1.PhaseEstablished && tunnel.Spec.MTU != 0 {
		return reconcile.Result{RequeueAfter: pollEstablished}, nil
	}
	return reconcile.Result{RequeueAfter: pollPending}, nil
}

// ensureTunnel creates the client Tunnel, or keeps what this cluster
// decides of it (identity, pod CIDRs, the filter) current, before the
// exchange, which reports on it. It returns the spec as it then is.
func (r *ConsumerReconciler) ensureTunnel(ctx context.Context, fc *offloadv1alpha1.ForeignCluster, tunnel *offloadv1alpha1.Tunnel) (offloadv1alpha1.TunnelSpec, error) {
	if err := r.Client.Get(ctx, client.ObjectKeyFromObject(tunnel), tunnel); client.IgnoreNotFound(err) != nil {
		return offloadv1alpha1.TunnelSpec{}, err
	}
	spec := tunnel.Spec
	spec.ClusterID, spec.ClusterName, spec.Role = fc.Spec.ClusterID, fc.Spec.ClusterName, offloadv1alpha1.TunnelClient
	spec.LocalPodCIDRs = r.Settings.podCIDRStrings()
	// The consumer's filter, from the Tunnel's first write: the gateway
	// never runs without it (ConsumerFilterReconciler follows the pods).
	var err error
	if spec.AllowedDestinations, err = r.Settings.reachablePods(ctx, r.Client); err != nil {
		return offloadv1alpha1.TunnelSpec{}, err
	}
	if err := applyTunnelOwned(ctx, r.Client, tunnel, spec, fc); err != nil {
		return offloadv1alpha1.TunnelSpec{}, err
	}
	return spec, nil
}

// connect runs one step of the exchange and says where the network stands.
func (r *ConsumerReconciler) connect(ctx context.Context, fc *offloadv1alpha1.ForeignCluster, tunnel *offloadv1alpha1.Tunnel, spec offloadv1alpha1.TunnelSpec) (offloadv1alpha1.PeeringPhase, metav1.Condition, error) {
	id, err := peering.ReadIdentity(ctx, r.Reader, r.Settings.Namespace)
	if err != nil {
		return "", metav1.Condition{}, err
	}
	pub, err := gatewayKey(ctx, r.Client, r.Reader, r.Settings.Namespace, tunnel.Name, tunnel)
	if err != nil {
		return "", metav1.Condition{}, err
	}

	creds, err := r.Providers.Get(ctx, fc)
	if errors.Is(err, providerclient.ErrNoCredentials) {
		return offloadv1alpha1.PhasePending, metav1.Condition{Status: metav1.ConditionFalse, Reason: "NotAuthenticated",
			Message: "waiting for the peering's credentials to ask the provider for the tunnel"}, nil
	}
	if err != nil {
		return "", metav1.Condition{}, err
	}
	p, err := creds.TenantClient(r.Client.Scheme())
	if err != nil {
		return "", metav1.Condition{}, err
	}
	want := offloadv1alpha1.NetworkPeeringSpec{
		ClusterID: id.ID, PublicKey: pub, PodCIDRs: r.Settings.podCIDRStrings(), MTU: tunnel.Status.PathMTU,
		ProviderViews: tunnel.Spec.Mappings,
	}
	np, err := askForTunnel(ctx, p, creds.Namespace, want)
	if err != nil {
		return "", metav1.Condition{}, err
	}
	served := meta.FindStatusCondition(np.Status.Conditions, offloadv1alpha1.ConditionReady)
	if served == nil || served.Status != metav1.ConditionTrue || np.Status.PublicKey == "" || np.Status.Endpoint == "" || len(np.Status.PodCIDRs) == 0 {
		msg := "waiting for the provider to answer the network peering"
		if served != nil && served.Message != "" {
			msg = "the provider says: " + peering.CleanText(served.Message)
		}
		return offloadv1alpha1.PhasePending, metav1.Condition{Status: metav1.ConditionFalse, Reason: "WaitingForProvider", Message: msg}, nil
	}
	bad := r.Settings.checkPeerCIDRs(tunnel, np.Status.PodCIDRs, "provider "+fc.Name)
	if bad == nil {
		if bad = r.Settings.checkPeerViews(np.Status.ConsumerViews, "the provider"); bad != nil {
			bad.message += ": nothing was routed"
		}
	}
	if err := tellRefusal(ctx, p, np, bad); err != nil {
		return "", metav1.Condition{}, err
	}
	if bad != nil {
		return offloadv1alpha1.PhaseFailed, metav1.Condition{Status: metav1.ConditionFalse, Reason: bad.reason, Message: bad.message}, nil
	}
	// New views stay clear of the provider's own (views and pod CIDRs), so
	// that it can mirror them: its pods then reach each other at the
	// addresses this cluster shows.
	avoid := viewPrefixes(np.Status.ConsumerViews)
	if own, err := ipam.ParsePrefixes("the provider's pod CIDR", np.Status.PodCIDRs); err == nil {
		avoid = append(avoid, own...)
	}
	mappings, allocated, err := views(ctx, r.Reader, r.Settings, tunnel, np.Status.PodCIDRs, avoid...)
	if err != nil {
		return offloadv1alpha1.PhaseFailed, metav1.Condition{Status: metav1.ConditionFalse, Reason: "NoFreeView", Message: err.Error()}, nil
	}
	spec.PeerPublicKey, spec.Endpoint, spec.MTU, spec.Mappings = np.Status.PublicKey, np.Status.Endpoint, np.Status.MTU, mappings
	spec.PeerViews = np.Status.ConsumerViews
	err = applyTunnelOwned(ctx, r.Client, tunnel, spec, fc)
	allocated()
	if err != nil {
		return "", metav1.Condition{}, err
	}
	if err := ensureGateway(ctx, r.Client, r.Reader, tunnel); err != nil {
		return "", metav1.Condition{}, err
	}
	if want.ProviderViews = mappings; !slices.Equal(np.Spec.ProviderViews, mappings) {
		if _, err := askForTunnel(ctx, p, creds.Namespace, want); err != nil {
			return "", metav1.Condition{}, err
		}
	}
	return tunnelPhase(tunnel)
}

// tunnelPhase reads the gateway's report.
func tunnelPhase(t *offloadv1alpha1.Tunnel) (offloadv1alpha1.PeeringPhase, metav1.Condition, error) {
	ready := meta.FindStatusCondition(t.Status.Conditions, offloadv1alpha1.ConditionReady)
	switch {
	case ready == nil:
		return offloadv1alpha1.PhasePending, metav1.Condition{Status: metav1.ConditionFalse, Reason: "GatewayStarting",
			Message: fmt.Sprintf("waiting for gateway %s to report", offloadv1alpha1.GatewayName(t.Name))}, nil
	case ready.Status == metav1.ConditionTrue:
		return offloadv1alpha1.PhaseEstablished, metav1.Condition{Status: metav1.ConditionTrue, Reason: offloadv1alpha1.ReasonTunnelConnected,
			Message: tunnelMessage(t, true)}, nil
	case ready.Reason == offloadv1alpha1.ReasonTunnelDisconnected:
		return offloadv1alpha1.PhaseDisconnected, metav1.Condition{Status: metav1.ConditionFalse, Reason: offloadv1alpha1.ReasonTunnelDisconnected,
			Message: tunnelMessage(t, false)}, nil
	default:
		return offloadv1alpha1.PhasePending, metav1.Condition{Status: metav1.ConditionFalse, Reason: ready.Reason, Message: ready.Message}, nil
	}
}

// tunnelMessage says that t is up, or that its peer does not answer. The
// client's end names the provider's gateway it dials; the server's end,
// which dials nothing, the consumer it serves.
func tunnelMessage(t *offloadv1alpha1.Tunnel, up bool) string {
	server := t.Spec.Role == offloadv1alpha1.TunnelServer
	switch {
	case up && server:
		return fmt.Sprintf("tunnel from consumer %s up (%s); its pods are %s here", t.Spec.ClusterName, t.Status.Implementation, describe(t.Spec.Mappings))
	case up:
		return fmt.Sprintf("tunnel to %s up (%s); the provider's pods are %s here", t.Spec.Endpoint, t.Status.Implementation, describe(t.Spec.Mappings))
	case server:
		return fmt.Sprintf("consumer %s's gateway does not answer through the tunnel: run kubectl offload status peer %s", t.Spec.ClusterName, t.Spec.ClusterName)
	}
	return fmt.Sprintf("the provider's gateway at %s does not answer through the tunnel: run kubectl offload status peer %s", t.Spec.Endpoint, t.Spec.ClusterName)
}

// recordNetwork writes the peering's network on Tunnel t, phase and
// NetworkReady, when they change, as their one writer (FieldManager): the
// ForeignCluster's status mirrors them.
func recordNetwork(ctx context.Context, cl client.Client, t *offloadv1alpha1.Tunnel, phase offloadv1alpha1.PeeringPhase, c metav1.Condition) error {
	c.Type, c.ObservedGeneration = offloadv1alpha1.ConditionNetworkReady, t.Generation
	old := meta.FindStatusCondition(t.Status.Conditions, c.Type)
	if t.Status.Phase == phase && old != nil && old.Status == c.Status && old.Reason == c.Reason && old.Message == c.Message && old.ObservedGeneration == c.ObservedGeneration {
		return nil
	}
	c.LastTransitionTime = metav1.Now()
	if old != nil && old.Status == c.Status {
		c.LastTransitionTime = old.LastTransitionTime
	}
	st := offloadv1alpha1.TunnelStatus{Phase: phase, Conditions: []metav1.Condition{c}}
	if err := ssa.ApplyStatus(ctx, cl, t, st, FieldManager); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("writing the network status of Tunnel %s: %w", klog.KObj(t), err)
	}
	return nil
}

// applyTunnelOwned is applyTunnel with owner set as the Tunnel's
// controller, so the Tunnel goes with the peering.
func applyTunnelOwned(ctx context.Context, c client.Client, t *offloadv1alpha1.Tunnel, spec offloadv1alpha1.TunnelSpec, owner client.Object) error {
	if t.UID == "" {
		if err := controllerutil.SetControllerReference(owner, t, c.Scheme()); err != nil {
			return err
		}
	}
	return applyTunnel(ctx, c, t, spec)
}

// tellRefusal tells the provider, on np, that this cluster refuses its
// announcement (bad), or that it no longer does (bad is nil).
func tellRefusal(ctx context.Context, c client.Client, np *offloadv1alpha1.NetworkPeering, bad *refusal) error {
	if np.Annotations[AnnotationRefusedAnnouncement] == bad.String() {
		return nil
	}
	patch := client.MergeFrom(np.DeepCopy())
	if bad == nil {
		delete(np.Annotations, AnnotationRefusedAnnouncement)
	} else {
		if np.Annotations == nil {
			np.Annotations = map[string]string{}
		}
		np.Annotations[AnnotationRefusedAnnouncement] = bad.String()
	}
	if err := c.Patch(ctx, np, patch); err != nil {
		return fmt.Errorf("telling the provider about its refused announcement (NetworkPeering %s): %w", klog.KObj(np), err)
	}
	return nil
}

// askForTunnel creates or updates the NetworkPeering in the tenant
// namespace and returns it with the provider's answer.
func askForTunnel(ctx context.Context, c client.Client, ns string, want offloadv1alpha1.NetworkPeeringSpec) (*offloadv1alpha1.NetworkPeering, error) {
	np := &offloadv1alpha1.NetworkPeering{}
	err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: offloadv1alpha1.NetworkPeeringName}, np)
	if apierrors.IsNotFound(err) {
		np = &offloadv1alpha1.NetworkPeering{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: offloadv1alpha1.NetworkPeeringName}, Spec: want}
		if err := c.Create(ctx, np); err != nil {
			return nil, fmt.Errorf("asking the provider for the tunnel (NetworkPeering %s): %w", klog.KObj(np), err)
		}
		return np, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading NetworkPeering %s/%s on the provider: %w", ns, offloadv1alpha1.NetworkPeeringName, err)
	}
	if np.Spec.ClusterID != want.ClusterID || np.Spec.PublicKey != want.PublicKey || np.Spec.MTU != want.MTU ||
		!slices.Equal(np.Spec.PodCIDRs, want.PodCIDRs) || !slices.Equal(np.Spec.ProviderViews, want.ProviderViews) {
		np.Spec = want
		if err := c.Update(ctx, np); err != nil {
			return nil, fmt.Errorf("updating NetworkPeering %s on the provider: %w", klog.KObj(np), err)
		}
	}
	return np, nil
}
