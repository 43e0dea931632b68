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
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/virtual-kubelet/virtual-kubelet/node"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// maxRestartDelay bounds the wait before a failed node controller restarts.
const maxRestartDelay = time.Minute

// runPeer runs the node controller of fc until ctx is cancelled, restarting
// it with backoff when it fails, for example while the provider is unreachable.
func (r *Reconciler) runPeer(ctx context.Context, fc *offloadv1alpha1.ForeignCluster, kubeconfig []byte) {
	logger := log.FromContext(ctx).WithValues("foreignCluster", klog.KObj(fc), "node", NodeName(fc.Name))
	delay := r.pollInterval()
	for ctx.Err() == nil {
		start := time.Now()
		err := r.runNode(ctx, fc, kubeconfig)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("the node controller stopped")
		}
		logger.Info("The virtual node controller stopped; restarting it", "error", err.Error(), "after", delay)
		outgoing, ready := metav1.ConditionUnknown, metav1.ConditionUnknown
		if meta.IsStatusConditionTrue(r.conditions(ctx, fc.Name), offloadv1alpha1.ConditionOutgoingPeering) {
			outgoing, ready = metav1.ConditionTrue, metav1.ConditionFalse
		}
		if setErr := r.setStatus(ctx, fc.Name, outgoing, ready, ReasonProviderUnreachable, err.Error()); setErr != nil {
			logger.Info("Cannot update the ForeignCluster status", "error", setErr.Error())
		}
		if time.Since(start) > maxRestartDelay {
			delay = r.pollInterval()
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, maxRestartDelay)
	}
}

// runNode reads the offer, starts the virtual-kubelet node controller and
// follows the offer until ctx is cancelled or the controller fails.
func (r *Reconciler) runNode(ctx context.Context, fc *offloadv1alpha1.ForeignCluster, kubeconfig []byte) error {
	p, err := r.newProvider(fc, kubeconfig)
	if err != nil {
		return err
	}
	offer, err := p.read(ctx)
	if err != nil {
		return err
	}
	p.observe(offer)
	if err := r.setStatus(ctx, fc.Name, metav1.ConditionTrue, metav1.ConditionUnknown, ReasonStarting, "starting virtual node "+NodeName(fc.Name)); err != nil {
		return err
	}
	interval := r.pollInterval()
	nc, err := node.NewNodeController(p, newNode(fc, offer.Spec.Resources), r.Kube.CoreV1().Nodes(),
		node.WithNodeEnableLeaseV1(r.Kube.CoordinationV1().Leases(corev1.NamespaceNodeLease), 0),
		node.WithNodePingInterval(interval),
		node.WithNodePingTimeout(interval),
		node.WithNodeStatusUpdateErrorHandler(func(ctx context.Context, err error) error {
			if !apierrors.IsNotFound(err) {
				return err
			}
			// Someone deleted the node: register it again.
			_, err = r.Kube.CoreV1().Nodes().Create(ctx, newNode(fc, p.current()), metav1.CreateOptions{})
			return err
		}))
	if err != nil {
		return fmt.Errorf("creating the node controller of %q: %w", NodeName(fc.Name), err)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer func() {
		cancel()
		<-nc.Done()
	}()
	go func() { _ = nc.Run(ctx) }()
	select {
	case <-nc.Ready():
	case <-nc.Done():
		return fmt.Errorf("registering virtual node %q: %w", NodeName(fc.Name), nc.Err())
	}
	reachable := false
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		offer, err := p.read(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err == nil {
			notify, changed := p.observe(offer)
			if (changed || !reachable) && notify != nil {
				// A fresh status: the new capacity, or Ready again at once after an outage.
				notify(newNode(fc, offer.Spec.Resources))
			}
			if setErr := r.setStatus(ctx, fc.Name, metav1.ConditionTrue, metav1.ConditionTrue, ReasonNodeReady, "virtual node "+NodeName(fc.Name)+" is Ready"); setErr != nil {
				log.FromContext(ctx).Info("Cannot update the ForeignCluster status", "error", setErr.Error())
			}
		} else if setErr := r.setStatus(ctx, fc.Name, metav1.ConditionTrue, metav1.ConditionFalse, ReasonProviderUnreachable,
			err.Error()+"; the virtual node goes NotReady until the provider answers again"); setErr != nil {
			log.FromContext(ctx).Info("Cannot update the ForeignCluster status", "error", setErr.Error())
		}
		reachable = err == nil
		select {
		case <-ctx.Done():
			return nil
		case <-nc.Done():
			return fmt.Errorf("running virtual node %q: %w", NodeName(fc.Name), errors.Join(nc.Err(), errors.New("the node controller stopped")))
		case <-ticker.C:
		}
	}
}

// newProvider builds the NodeProvider reading the offer with kubeconfig,
// whose context namespace is the tenant namespace.
func (r *Reconciler) newProvider(fc *offloadv1alpha1.ForeignCluster, kubeconfig []byte) (*offerProvider, error) {
	cc, err := clientcmd.NewClientConfigFromBytes(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig of %s: %w", fc.Name, err)
	}
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("reading the kubeconfig of %s: %w", fc.Name, err)
	}
	namespace, _, err := cc.Namespace()
	if err != nil {
		return nil, fmt.Errorf("reading the tenant namespace in the kubeconfig of %s: %w", fc.Name, err)
	}
	cfg.Timeout = r.pollInterval()
	remote, err := client.New(cfg, client.Options{Scheme: r.Client.Scheme()})
	if err != nil {
		return nil, fmt.Errorf("creating the client of provider %s: %w", fc.Name, err)
	}
	return &offerProvider{remote: remote, offer: types.NamespacedName{Namespace: namespace, Name: fc.Spec.ClusterName}}, nil
}

func (r *Reconciler) pollInterval() time.Duration {
	if r.PollInterval > 0 {
		return r.PollInterval
	}
	return DefaultPollInterval
}

// conditions returns the current conditions of ForeignCluster name.
func (r *Reconciler) conditions(ctx context.Context, name string) []metav1.Condition {
	var fc offloadv1alpha1.ForeignCluster
	if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, &fc); err != nil {
		return nil
	}
	return fc.Status.Conditions
}

// setStatus sets OutgoingPeering and VirtualNodeReady on ForeignCluster
// name, with status.outgoing following OutgoingPeering; it writes only when
// something changed. Unknown means pending: kubectl offload peer --wait keeps
// waiting on Unknown and stops on False.
func (r *Reconciler) setStatus(ctx context.Context, name string, outgoing, ready metav1.ConditionStatus, reason, message string) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var fc offloadv1alpha1.ForeignCluster
		if err := r.Client.Get(ctx, types.NamespacedName{Name: name}, &fc); err != nil {
			return client.IgnoreNotFound(err)
		}
		changed := false
		set := func(t string, s metav1.ConditionStatus, reason, message string) {
			c := metav1.Condition{Type: t, Status: s, Reason: reason, Message: message, ObservedGeneration: fc.Generation}
			changed = meta.SetStatusCondition(&fc.Status.Conditions, c) || changed
		}
		phase := offloadv1alpha1.PhasePending
		switch outgoing {
		case metav1.ConditionTrue:
			set(offloadv1alpha1.ConditionOutgoingPeering, outgoing, ReasonEstablished, "the provider's ResourceOffer was read")
			phase = offloadv1alpha1.PhaseEstablished
		case metav1.ConditionFalse:
			set(offloadv1alpha1.ConditionOutgoingPeering, outgoing, reason, message)
			phase = offloadv1alpha1.PhaseNone
		default:
			set(offloadv1alpha1.ConditionOutgoingPeering, outgoing, reason, message)
		}
		set(offloadv1alpha1.ConditionVirtualNodeReady, ready, reason, message)
		if phase != fc.Status.Outgoing {
			fc.Status.Outgoing = phase
			changed = true
		}
		if !changed {
			return nil
		}
		return r.Client.Status().Update(ctx, &fc)
	})
}
