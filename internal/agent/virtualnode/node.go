package virtualnode

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/virtual-kubelet/virtual-kubelet/node"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/providerclient"
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

// runNode waits for the offer, starts the virtual-kubelet node controller
// and follows the offer, pinging the provider, until ctx is cancelled or
// the controller fails. The offer is watched, so a new one shows at once;
// the ping every poll interval tells whether the provider still answers.
func (r *Reconciler) runNode(ctx context.Context, peer *peer) error {
	fc := peer.fc
	p, err := r.newProvider(ctx, fc, peer.creds)
	if err != nil {
		return err
	}
	p.policy = &peer.policy
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	interval := r.pollInterval()
	offers := make(chan *offloadv1alpha1.ResourceOffer, 1)
	go p.follow(ctx, offers, interval)
	ticker := time.NewTicker(interval)
	defer ticker.Stop()

	offer, err := p.read(ctx)
	for err != nil {
		if !apierrors.IsNotFound(err) {
			return err
		}
		// The provider publishes the offer right after the tenant is made.
		if err := r.setStatus(ctx, fc.Name, metav1.ConditionUnknown, metav1.ConditionUnknown, ReasonStarting,
			"waiting for the provider to publish ResourceOffer "+p.offer.String(), false); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case offer = <-offers:
			err = nil
		case <-ticker.C:
			offer, err = p.read(ctx)
		}
	}
	p.observe(offer)
	if err := r.setStatus(ctx, fc.Name, metav1.ConditionTrue, metav1.ConditionUnknown, ReasonStarting, "starting virtual node "+offloadv1alpha1.VirtualNodeName(fc.Name), false); err != nil {
		return err
	}
	nc, err := node.NewNodeController(p, newNode(fc, p.endpoint, offer.Spec.Resources), r.Kube.CoreV1().Nodes(),
		node.WithNodeEnableLeaseV1(r.Kube.CoordinationV1().Leases(corev1.NamespaceNodeLease), 0),
		node.WithNodePingInterval(interval),
		node.WithNodePingTimeout(interval),
		node.WithNodeStatusUpdateErrorHandler(func(ctx context.Context, err error) error {
			if !apierrors.IsNotFound(err) {
				return err
			}
			// Someone deleted the node: register it again.
			_, err = r.Kube.CoreV1().Nodes().Create(ctx, newNode(fc, p.endpoint, p.current()), metav1.CreateOptions{})
			return err
		}))
	if err != nil {
		return fmt.Errorf("creating the node controller of %q: %w", offloadv1alpha1.VirtualNodeName(fc.Name), err)
	}
	defer func() {
		cancel()
		<-nc.Done()
	}()
	go func() { _ = nc.Run(ctx) }()
	select {
	case <-nc.Ready():
	case <-nc.Done():
		return fmt.Errorf("registering virtual node %q: %w", offloadv1alpha1.VirtualNodeName(fc.Name), nc.Err())
	}
	var unreachable error // what the last ping said
	r.healthy(ctx, fc, p, offer, &unreachable)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-nc.Done():
			return fmt.Errorf("running virtual node %q: %w", offloadv1alpha1.VirtualNodeName(fc.Name), errors.Join(nc.Err(), errors.New("the node controller stopped")))
		case offer := <-offers:
			if unreachable == nil {
				r.healthy(ctx, fc, p, offer, &unreachable)
			}
		case <-ticker.C:
			offer, err := p.read(ctx)
			if ctx.Err() != nil {
				return nil
			}
			if err == nil {
				r.healthy(ctx, fc, p, offer, &unreachable)
				continue
			}
			if unreachable == nil {
				// NotReady at once: the node controller stops renewing the
				// Lease too, but kube-controller-manager would take its
				// node-monitor-grace-period to notice.
				if notify := p.notifier(); notify != nil {
					notify(nodeWithHealth(fc, p.endpoint, p.current(), err))
				}
			}
			unreachable = err
			// An Unauthorized answer sets CredentialsAccepted=False: the
			// credentials controller, which watches the VirtualNode, asks
			// the provider whether the credentials were revoked then.
			reason := ReasonProviderUnreachable
			if apierrors.IsUnauthorized(err) {
				reason = offloadv1alpha1.ReasonUnauthorized
			}
			if setErr := r.setStatus(ctx, fc.Name, metav1.ConditionTrue, metav1.ConditionFalse, reason,
				err.Error()+"; the virtual node is NotReady until the provider answers again", false); setErr != nil {
				log.FromContext(ctx).Info("Cannot update the VirtualNode status", "error", setErr.Error())
			}
		}
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

// newProvider builds the NodeProvider reading the offer with creds.
func (r *Reconciler) newProvider(ctx context.Context, fc *offloadv1alpha1.ForeignCluster, creds *providerclient.Credentials) (*offerProvider, error) {
	// No client-wide timeout: it would cut the watch of the offer. Reads
	// are bounded by readTimeout instead.
	cfg := creds.Config()
	p := &offerProvider{offer: types.NamespacedName{Namespace: creds.Namespace, Name: fc.Spec.ClusterName}, readTimeout: r.pollInterval()}
	remote, err := client.NewWithWatch(cfg, client.Options{Scheme: r.Client.Scheme()})
	if err != nil {
		return nil, fmt.Errorf("creating the client of provider %s: %w", fc.Name, err)
	}
	p.remote = remote
	if p.endpoint, err = r.endpoint(ctx, offloadv1alpha1.VirtualNodeName(fc.Name)); err != nil {
		return nil, err
	}
	p.endpoint.version = r.providerVersion(fc, cfg)
	return p, nil
}

// providerVersion asks the provider's API server for its Kubernetes
// version, which the virtual node reports as its kubelet version, as a
// real node reports its own. It returns "" when the provider does not answer.
func (r *Reconciler) providerVersion(fc *offloadv1alpha1.ForeignCluster, cfg *rest.Config) string {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = r.pollInterval()
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err == nil {
		var v *version.Info
		if v, err = dc.ServerVersion(); err == nil {
			return v.GitVersion
		}
	}
	log.Log.Info("Cannot read the provider's Kubernetes version", "foreignCluster", klog.KObj(fc), "error", err.Error())
	return ""
}

func (r *Reconciler) pollInterval() time.Duration {
	if r.PollInterval > 0 {
		return r.PollInterval
	}
	return DefaultPollInterval
}
