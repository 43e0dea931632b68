package virtualnode

import (
	"cmp"
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// fallbackKubeletVersion is what a virtual node reports as its kubelet
// version when the provider's API server did not tell its own version.
const fallbackKubeletVersion = "v0.0.0-unknown"

// offerProvider is the virtual-kubelet NodeProvider of one peer: Ping reads
// the ResourceOffer with the tenant's credentials, and the node status
// follows the offer's resources.
type offerProvider struct {
	remote client.WithWatch
	// endpoint is where the node's kubelet API is served, and the
	// provider's version the node reports.
	endpoint endpoint
	offer    types.NamespacedName
	// readTimeout bounds a read of the offer.
	readTimeout time.Duration

	// policy and offered, when set, receive the policy and the resources
	// of every offer observed.
	policy  *atomic.Pointer[offloadv1alpha1.ConsumerPolicy]
	offered *atomic.Pointer[corev1.ResourceList]

	mu        sync.Mutex
	notify    func(*corev1.Node)
	resources corev1.ResourceList
}

// Ping always succeeds: the provider's reachability is the node's Ready
// condition, which the run loop sets through NotifyNodeStatus every poll
// interval. virtual-kubelet writes no node status while Ping fails, so a
// failing Ping would hold back both the NotReady status during an outage
// (leaving it to kube-controller-manager's grace period) and the Ready one
// after it (until the next periodic status update, a minute later).
func (p *offerProvider) Ping(context.Context) error { return nil }

// NotifyNodeStatus keeps cb; the run loop calls it when the offer or the
// provider's reachability changes.
func (p *offerProvider) NotifyNodeStatus(_ context.Context, cb func(*corev1.Node)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.notify = cb
}

// read gets the ResourceOffer from the provider.
func (p *offerProvider) read(ctx context.Context) (*offloadv1alpha1.ResourceOffer, error) {
	if p.readTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.readTimeout)
		defer cancel()
	}
	var offer offloadv1alpha1.ResourceOffer
	if err := p.remote.Get(ctx, p.offer, &offer); err != nil {
		return nil, fmt.Errorf("reading ResourceOffer %s on the provider: %w", p.offer, err)
	}
	return &offer, nil
}

// follow watches the ResourceOffer and sends every version it sees to
// offers, replacing one not yet received, until ctx is done. A broken
// watch is opened again after retry.
func (p *offerProvider) follow(ctx context.Context, offers chan *offloadv1alpha1.ResourceOffer, retry time.Duration) {
	for ctx.Err() == nil {
		w, err := p.remote.Watch(ctx, &offloadv1alpha1.ResourceOfferList{}, client.InNamespace(p.offer.Namespace),
			client.MatchingFields{"metadata.name": p.offer.Name})
		if err == nil {
			for ev := range w.ResultChan() {
				o, ok := ev.Object.(*offloadv1alpha1.ResourceOffer)
				if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) {
					continue
				}
				select { // keep only the newest
				case <-offers:
				default:
				}
				offers <- o
			}
			w.Stop()
		}
		select {
		case <-ctx.Done():
		case <-time.After(retry):
		}
	}
}

// observe records the offer's resources and policy, and reports whether
// the resources changed, with the callback to call then.
func (p *offerProvider) observe(offer *offloadv1alpha1.ResourceOffer) (func(*corev1.Node), bool) {
	if p.policy != nil {
		policy := offer.Spec.Policy
		p.policy.Store(&policy)
	}
	if p.offered != nil {
		resources := offer.Spec.Resources.DeepCopy()
		p.offered.Store(&resources)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if apiequality.Semantic.DeepEqual(p.resources, offer.Spec.Resources) {
		return p.notify, false
	}
	p.resources = offer.Spec.Resources.DeepCopy()
	return p.notify, true
}

// notifier returns the callback of the node controller, nil before it runs.
func (p *offerProvider) notifier() func(*corev1.Node) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.notify
}

// newNode builds the virtual node of ForeignCluster fc with resources,
// Ready while the provider is reachable.
func newNode(fc *offloadv1alpha1.ForeignCluster, ep endpoint, resources corev1.ResourceList) *corev1.Node {
	return nodeWithHealth(fc, ep, resources, nil)
}

// endpoint is where the kubelet API of the virtual nodes is served.
type endpoint struct {
	ip   string
	port int32
	// version is the provider's Kubernetes version, which the node reports
	// as its kubelet version; empty until the provider told it.
	version string
}

// KubeletPorts serves the kubelet API of the virtual nodes, each on a port
// of its own, as kubeletapi.Server does.
type KubeletPorts interface {
	// NodePort returns the port of node's kubelet API: published, the
	// port the node published before, when it is free.
	NodePort(node string, published int32) (int32, error)
	// ForgetNode stops serving node's kubelet API.
	ForgetNode(node string)
}

// endpoint returns where this agent serves the kubelet API of virtual node
// name: on the port it published before when that is free, so that a
// restarted agent does not move it.
func (r *Reconciler) endpoint(ctx context.Context, name string) (endpoint, error) {
	ep := endpoint{ip: r.NodeIP}
	if r.KubeletPorts == nil {
		return ep, nil
	}
	var published int32
	if n, err := r.Kube.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); err == nil {
		published = n.Status.DaemonEndpoints.KubeletEndpoint.Port
	}
	port, err := r.KubeletPorts.NodePort(name, published)
	if err != nil {
		return ep, err
	}
	ep.port = port
	return ep, nil
}

// nodeWithHealth builds the virtual node of ForeignCluster fc with
// resources; a non-nil unreachable makes it NotReady with that reason.
func nodeWithHealth(fc *offloadv1alpha1.ForeignCluster, ep endpoint, resources corev1.ResourceList, unreachable error) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: offloadv1alpha1.VirtualNodeName(fc.Name),
			Labels: map[string]string{
				offloadv1alpha1.LabelType:            offloadv1alpha1.TypeVirtualNode,
				offloadv1alpha1.LabelRemoteClusterID: fc.Spec.ClusterID,
				"kubernetes.io/role":                 "agent",
				"type":                               "virtual-kubelet",
				corev1.LabelOSStable:                 "linux",
				corev1.LabelHostname:                 offloadv1alpha1.VirtualNodeName(fc.Name),
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: offloadv1alpha1.GroupVersion.String(), Kind: "ForeignCluster", Name: fc.Name, UID: fc.UID,
			}},
		},
		Spec: corev1.NodeSpec{
			Taints: []corev1.Taint{{Key: offloadv1alpha1.TaintVirtualNode, Value: "true", Effect: corev1.TaintEffectNoExecute}},
		},
		Status: corev1.NodeStatus{
			Capacity:    resources.DeepCopy(),
			Allocatable: resources.DeepCopy(),
			Phase:       corev1.NodeRunning,
			Conditions:  nodeConditions(unreachable),
			NodeInfo: corev1.NodeSystemInfo{
				OperatingSystem: "linux",
				KubeletVersion:  cmp.Or(ep.version, fallbackKubeletVersion),
			},
		},
	}
	if ep.ip != "" {
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ep.ip}}
	}
	if ep.port > 0 {
		n.Status.DaemonEndpoints.KubeletEndpoint.Port = ep.port
	}
	return n
}

// nodeConditions are a virtual node's conditions: Ready while the provider
// is reachable (unreachable is nil), NotReady with why otherwise; never
// under pressure.
func nodeConditions(unreachable error) []corev1.NodeCondition {
	now := metav1.NewTime(time.Now())
	condition := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason, message string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason, Message: message, LastHeartbeatTime: now, LastTransitionTime: now}
	}
	ready := condition(corev1.NodeReady, corev1.ConditionTrue, "ProviderReachable", "the provider serves the ResourceOffer")
	if unreachable != nil {
		ready = condition(corev1.NodeReady, corev1.ConditionFalse, ReasonProviderUnreachable, unreachable.Error())
	}
	return []corev1.NodeCondition{
		ready,
		condition(corev1.NodeMemoryPressure, corev1.ConditionFalse, "ProviderReachable", ""),
		condition(corev1.NodeDiskPressure, corev1.ConditionFalse, "ProviderReachable", ""),
		condition(corev1.NodePIDPressure, corev1.ConditionFalse, "ProviderReachable", ""),
		condition(corev1.NodeNetworkUnavailable, corev1.ConditionFalse, "ProviderReachable", ""),
	}
}

// current returns the resources last read from the offer.
func (p *offerProvider) current() corev1.ResourceList {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.resources.DeepCopy()
}
