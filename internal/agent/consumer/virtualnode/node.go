package virtualnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/virtual-kubelet/virtual-kubelet/node"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/log"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// nodeFailed records on the VirtualNode that the node controller of p
// stopped with err: the virtual node is NotReady while it restarts.
func (r *Reconciler) nodeFailed(ctx context.Context, p *peer, err error) {
	outgoing, ready := metav1.ConditionUnknown, metav1.ConditionUnknown
	if meta.IsStatusConditionTrue(r.conditions(ctx, p.fc.Name), offloadv1alpha1.ConditionOfferRead) {
		outgoing, ready = metav1.ConditionTrue, metav1.ConditionFalse
	}
	if setErr := r.setStatus(ctx, p.fc.Name, outgoing, ready, ReasonProviderUnreachable, err.Error(), false); setErr != nil {
		log.FromContext(ctx).Info("Cannot update the VirtualNode status", "error", setErr.Error())
	}
}

// runNode runs the peer's virtual node until ctx is cancelled or the node
// controller fails, in three phases: wait for the provider's offer,
// register the node with virtual-kubelet's node controller, and follow the
// offer and the provider's health. The offer is watched, so a new one
// shows at once; a read every poll interval tells whether the provider
// still answers.
func (r *Reconciler) runNode(ctx context.Context, peer *peer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p, err := r.newProvider(ctx, peer)
	if err != nil {
		return err
	}
	interval := r.pollInterval()
	offers := make(chan *offloadv1alpha1.ResourceOffer, 1)
	go p.follow(ctx, offers, interval)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()

	offer, err := r.waitForOffer(ctx, peer, p, offers, ticker.C)
	if err != nil || offer == nil {
		return err
	}
	nc, err := r.register(ctx, peer, p, offer)
	if err != nil {
		return err
	}
	defer func() {
		cancel()
		<-nc.Done()
	}()
	return r.followOffer(ctx, peer, p, nc, offer, offers, ticker.C)
}

// waitForOffer reads the provider's ResourceOffer until there is one,
// which the provider publishes right after it made the tenant. It returns
// nil when ctx ends first.
func (r *Reconciler) waitForOffer(ctx context.Context, peer *peer, p *offerProvider, offers <-chan *offloadv1alpha1.ResourceOffer, tick <-chan time.Time) (*offloadv1alpha1.ResourceOffer, error) {
	offer, err := p.read(ctx)
	for err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, err
		}
		if err := r.setStatus(ctx, peer.fc.Name, metav1.ConditionUnknown, metav1.ConditionUnknown, ReasonStarting,
			"waiting for the provider to publish ResourceOffer "+p.offer.String(), false); err != nil {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, nil
		case offer = <-offers:
			err = nil
		case <-tick:
			offer, err = p.read(ctx)
		}
	}
	p.observe(offer)
	return offer, nil
}

// register starts virtual-kubelet's node controller for the peer's node,
// with the offer's resources, and returns it once the node is registered.
// The node controller stops with ctx.
func (r *Reconciler) register(ctx context.Context, peer *peer, p *offerProvider, offer *offloadv1alpha1.ResourceOffer) (*node.NodeController, error) {
	fc, name := peer.fc, peer.node()
	if err := r.setStatus(ctx, fc.Name, metav1.ConditionTrue, metav1.ConditionUnknown, ReasonStarting, "starting virtual node "+name, false); err != nil {
		return nil, err
	}
	interval := r.pollInterval()
	nc, err := node.NewNodeController(p, r.taint(newNode(fc, p.endpoint, offer.Spec.Resources)), r.Kube.CoreV1().Nodes(),
		node.WithNodeEnableLeaseV1(r.Kube.CoordinationV1().Leases(corev1.NamespaceNodeLease), 0),
		node.WithNodePingInterval(interval),
		node.WithNodePingTimeout(interval),
		node.WithNodeStatusUpdateErrorHandler(func(ctx context.Context, err error) error {
			if !apierrors.IsNotFound(err) {
				return err
			}
			// Someone deleted the node: register it again.
			_, err = r.Kube.CoreV1().Nodes().Create(ctx, r.taint(newNode(fc, p.endpoint, p.current())), metav1.CreateOptions{})
			return err
		}))
	if err != nil {
		return nil, fmt.Errorf("creating the node controller of %q: %w", name, err)
	}
	go func() { _ = nc.Run(ctx) }()
	select {
	case <-nc.Ready():
		// Not fatal: the node serves its pods either way.
		if err := r.alignTaint(ctx, name); err != nil {
			log.FromContext(ctx).Error(err, "Cannot give the virtual node the taint the agent's settings ask for", "node", name)
		}
		return nc, nil
	case <-nc.Done():
		return nil, fmt.Errorf("registering virtual node %q: %w", name, nc.Err())
	}
}

// taint gives n, a virtual node to register, the virtual-node taint unless
// r.Untainted.
func (r *Reconciler) taint(n *corev1.Node) *corev1.Node {
	n.Spec.Taints = slices.DeleteFunc(n.Spec.Taints, func(t corev1.Taint) bool { return t.Key == offloadv1alpha1.TaintVirtualNode })
	if !r.Untainted {
		n.Spec.Taints = append(n.Spec.Taints, offloadv1alpha1.VirtualNodeTaint())
	}
	return n
}

// alignTaint gives registered virtual node name the virtual-node taint, or
// takes it away, as r.Untainted says: virtual-kubelet writes a node's spec
// only when it creates the node, so a node registered before the setting
// changed (an upgrade with virtualNodes.taint changed) keeps what it had.
// Its other taints stay.
func (r *Reconciler) alignTaint(ctx context.Context, name string) error {
	n, err := r.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("reading virtual node %q: %w", name, err)
	}
	if offloadv1alpha1.VirtualNodeUntainted(n) == r.Untainted {
		return nil
	}
	taints := r.taint(n.DeepCopy()).Spec.Taints
	if taints == nil {
		taints = []corev1.Taint{}
	}
	body, err := json.Marshal([]map[string]any{
		{"op": "test", "path": "/metadata/resourceVersion", "value": n.ResourceVersion},
		{"op": "add", "path": "/spec/taints", "value": taints},
	})
	if err != nil {
		return err
	}
	if _, err := r.Kube.CoreV1().Nodes().Patch(ctx, name, types.JSONPatchType, body, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("changing the taints of virtual node %q: %w", name, err)
	}
	log.FromContext(ctx).Info("Changed the virtual node's taint", "node", name, "tainted", !r.Untainted)
	return nil
}

// followOffer keeps the registered node in line with the offer and the
// provider's health until ctx ends or the node controller stops.
func (r *Reconciler) followOffer(ctx context.Context, peer *peer, p *offerProvider, nc *node.NodeController, offer *offloadv1alpha1.ResourceOffer,
	offers <-chan *offloadv1alpha1.ResourceOffer, tick <-chan time.Time) error {
	var unreachable error // what the last read said
	r.healthy(ctx, peer.fc, p, offer, &unreachable)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-nc.Done():
			return fmt.Errorf("running virtual node %q: %w", peer.node(), errors.Join(nc.Err(), errors.New("the node controller stopped")))
		case offer := <-offers:
			if unreachable == nil {
				r.healthy(ctx, peer.fc, p, offer, &unreachable)
			}
		case <-tick:
			offer, err := p.read(ctx)
			switch {
			case ctx.Err() != nil:
				return nil
			case err == nil:
				r.healthy(ctx, peer.fc, p, offer, &unreachable)
			default:
				r.unhealthy(ctx, peer.fc, p, err, &unreachable)
			}
		}
	}
}

// unhealthy records a failed read of the offer: the node is NotReady at
// once, and the VirtualNode says why. The node controller stops renewing
// the Lease too, but kube-controller-manager would take its
// node-monitor-grace-period to notice.
func (r *Reconciler) unhealthy(ctx context.Context, fc *offloadv1alpha1.ForeignCluster, p *offerProvider, err error, unreachable *error) {
	if *unreachable == nil {
		if notify := p.notifier(); notify != nil {
			notify(nodeWithHealth(fc, p.endpoint, p.current(), err))
		}
	}
	*unreachable = err
	// An Unauthorized answer sets CredentialsAccepted=False: the
	// credentials controller, which watches the VirtualNode, asks the
	// provider whether the credentials were revoked then.
	reason := ReasonProviderUnreachable
	if apierrors.IsUnauthorized(err) {
		reason = offloadv1alpha1.ReasonUnauthorized
	}
	if setErr := r.setStatus(ctx, fc.Name, metav1.ConditionTrue, metav1.ConditionFalse, reason,
		err.Error()+"; the virtual node is NotReady until the provider answers again", false); setErr != nil {
		log.FromContext(ctx).Info("Cannot update the VirtualNode status", "error", setErr.Error())
	}
}

// healthy records a successful read of offer: the node gets its resources
// and is Ready again after an outage, and the VirtualNode says so.
func (r *Reconciler) healthy(ctx context.Context, fc *offloadv1alpha1.ForeignCluster, p *offerProvider, offer *offloadv1alpha1.ResourceOffer, unreachable *error) {
	notify, changed := p.observe(offer)
	if (changed || *unreachable != nil) && notify != nil {
		notify(newNode(fc, p.endpoint, offer.Spec.Resources))
	}
	*unreachable = nil
	if err := r.setProviderPolicy(ctx, fc.Name, offer.Spec.Policy); err != nil {
		log.FromContext(ctx).Info("Cannot record the provider's policy in the VirtualNode status", "error", err.Error())
	}
	if err := r.setStatus(ctx, fc.Name, metav1.ConditionTrue, metav1.ConditionTrue, ReasonNodeReady, "virtual node "+offloadv1alpha1.VirtualNodeName(fc.Name)+" is Ready", true); err != nil {
		log.FromContext(ctx).Info("Cannot update the VirtualNode status", "error", err.Error())
	}
}

// newProvider builds the NodeProvider of the peer's node, over the
// runtime's client of the offer: where the node's kubelet API is, and the
// provider's version, which the node reports.
func (r *Reconciler) newProvider(ctx context.Context, peer *peer) (*offerProvider, error) {
	p := &offerProvider{remote: peer.offers, policy: &peer.policy, offered: &peer.offered, readTimeout: r.pollInterval(),
		offer: types.NamespacedName{Namespace: peer.creds.Namespace, Name: peer.fc.Spec.ClusterName}}
	var err error
	if p.endpoint, err = r.endpoint(ctx, peer.node()); err != nil {
		return nil, err
	}
	p.endpoint.version = providerVersion(peer)
	return p, nil
}

// providerVersion asks the provider's API server for its Kubernetes
// version, which the virtual node reports as its kubelet version, as a
// real node reports its own. It returns "" when the provider does not answer.
func providerVersion(peer *peer) string {
	v, err := peer.discovery.ServerVersion()
	if err == nil {
		return v.GitVersion
	}
	log.Log.Info("Cannot read the provider's Kubernetes version", "foreignCluster", klog.KObj(peer.fc), "error", err.Error())
	return ""
}

func (r *Reconciler) pollInterval() time.Duration {
	if r.PollInterval > 0 {
		return r.PollInterval
	}
	return DefaultPollInterval
}
