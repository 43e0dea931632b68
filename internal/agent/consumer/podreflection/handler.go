// Package podreflection is the virtual-kubelet pod lifecycle handler of a
// virtual node: it runs the consumer pods bound to the virtual node as pods
// in the provider's twin namespaces, and reports their status back.
//
// It is a thin adapter over internal/agent/consumer/reflection, which does every
// translation. The remote pods carry the origin labels (cluster ID and pod
// UID), so after a restart the handler rebuilds its view from the provider
// alone and nothing is created twice.
//
// The tenant identity it acts with may only touch pods, ConfigMaps, Secrets
// and Services in twin namespaces, and cannot list pods cluster-wide. The
// handler therefore runs one pod informer per twin namespace, restricted to
// the consumer's origin cluster ID label. Informers start when the handler
// starts, for every twin namespace the consumer's NamespaceOffloadings list
// for the provider, and lazily for any twin namespace a pod resolves to
// later.
package podreflection

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/objectreflection"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/podcontroller"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
)

// ErrNotOffloaded is wrapped by the errors of pods whose namespace has no
// Ready twin namespace on the provider.
var ErrNotOffloaded = errors.New("the namespace is not offloaded to the provider")

// Options configure a Handler.
type Options struct {
	// Provider is a client of the provider cluster acting as the tenant
	// identity. It may only touch twin namespaces.
	Provider kubernetes.Interface
	// Consumer is a client of the consumer cluster. It reads the ConfigMaps
	// and Secrets pods reference, and consumer pods that LocalPods does
	// not know.
	Consumer kubernetes.Interface
	// ConsumerReader reads NamespaceOffloadings on the consumer for the
	// default TwinNamespace and TwinNamespaces. A manager's cached client
	// fits. Required unless both are set.
	ConsumerReader client.Reader
	// LocalPods lists the consumer pods bound to the virtual node, usually
	// from the PodController's pod informer. Optional: without it, consumer
	// pods are read from Consumer.
	LocalPods corev1listers.PodLister
	// LocalPodsSynced reports whether LocalPods' informer has listed the
	// pods once. Optional. With it, the handler reads no consumer pod from
	// Consumer for the remote pods' changes: before the sync it leaves
	// them to the replay that follows it (NotifyPods), after the sync a pod
	// LocalPods lacks is gone. Without it, every remote pod whose consumer
	// pod LocalPods lacks costs a read: in a mass deletion, every one.
	LocalPodsSynced cache.InformerSynced

	// ConsumerClusterID is the consumer's cluster ID, the value of the
	// origin cluster label on everything the handler creates.
	ConsumerClusterID string
	// ProviderClusterID is the provider's cluster ID, the key of the
	// NamespaceOffloading status entries of this provider.
	ProviderClusterID string
	// VirtualNodeName is the name of the virtual node whose pods this
	// handler runs.
	VirtualNodeName string
	// VirtualNodeLabels are the virtual node's labels; see
	// reflection.Origin.VirtualNodeLabels. Optional.
	VirtualNodeLabels map[string]string
	// Addresses returns the address translation of the peering's network
	// fabric: pods show their provider IPs in the consumer's view. nil (or
	// a nil func) translates nothing.
	Addresses func() *reflection.Addresses
	// Policy returns the provider's policy for this cluster's pods, as its
	// newest ResourceOffer says (see reflection.Origin's NodePlacement,
	// NodeSelector and Tolerations). A nil func, or nil, means the default
	// policy: no node placement, any node.
	Policy func() *offloadv1alpha1.ConsumerPolicy
	// Claims resolves a claim of a consumer namespace to its remote claim
	// in twin namespace twin, or says why it has none there
	// (storage.RemoteClaimOf). nil: no claim has one.
	Claims func(ctx context.Context, namespace, claim, twin string) (string, error)
	// NodeIP is the virtual node's address, published as the host IP of
	// its pods. Empty keeps the pods' host IP as it is.
	NodeIP string
	// TokenRenewInterval is how often Run renews the service-account
	// tokens that are due; zero means DefaultTokenRenewInterval.
	TokenRenewInterval time.Duration

	// TwinNamespace resolves a consumer namespace to its Ready twin
	// namespace on the provider. Defaults to reading the namespace's
	// NamespaceOffloading with ConsumerReader.
	TwinNamespace func(consumerNamespace string) (string, bool)
	// TwinNamespaces lists every twin namespace on the provider, keyed by
	// twin namespace with the consumer namespace as value, whatever its
	// phase. Defaults to listing NamespaceOffloadings with ConsumerReader.
	TwinNamespaces func(ctx context.Context) (map[string]string, error)

	// Events records the events of remote pods on their consumer pods
	// (events.go). A recorder of a record.Broadcaster fits: it correlates
	// and rate-limits them per pod. nil records none.
	Events record.EventRecorder

	// Logger logs what the handler does.
	Logger klog.Logger
}

// Handler is the podcontroller.Provider of one virtual node. Create it
// with New, start it with Start before the pod controller runs, and run
// its own loops with Run once the pod controller is ready.
type Handler struct {
	opts Options

	mu      sync.Mutex
	ctx     context.Context // set by Start; the lifetime of the informers
	twins   map[string]*twinInformer
	notify  func(*corev1.Pod)
	started bool
	cas     map[string]cachedCA // by consumer namespace
	// tokens is when the token in each pod's token Secret expires, by
	// consumer pod UID, as this handler last wrote or read it: RenewTokens
	// reads only the Secrets that are due.
	tokens map[types.UID]time.Time
	// eventsSince is when Start ran: remote events from before are not
	// recorded again.
	eventsSince time.Time
	// refusals are what the provider refused of each consumer pod, by UID:
	// ephemeral containers and resizes (kubelet.go).
	refusals map[types.UID]*refusals
}

var _ podcontroller.Provider = (*Handler)(nil)

// New checks opts and returns a Handler.
func New(opts Options) (*Handler, error) {
	switch {
	case opts.Provider == nil:
		return nil, errors.New("podreflection: the provider client is missing")
	case opts.Consumer == nil:
		return nil, errors.New("podreflection: the consumer client is missing")
	case opts.ConsumerClusterID == "":
		return nil, errors.New("podreflection: the consumer cluster ID is missing")
	case opts.ProviderClusterID == "":
		return nil, errors.New("podreflection: the provider cluster ID is missing")
	case opts.VirtualNodeName == "":
		return nil, errors.New("podreflection: the virtual node name is missing")
	case opts.ConsumerReader == nil && (opts.TwinNamespace == nil || opts.TwinNamespaces == nil):
		return nil, errors.New("podreflection: a consumer reader is needed to resolve twin namespaces")
	}
	if opts.TwinNamespace == nil {
		opts.TwinNamespace = objectreflection.DefaultTwinNamespace(opts.ConsumerReader, opts.ProviderClusterID)
	}
	if opts.TwinNamespaces == nil {
		opts.TwinNamespaces = objectreflection.DefaultTwinNamespaces(opts.ConsumerReader, opts.ProviderClusterID)
	}
	return &Handler{opts: opts, twins: map[string]*twinInformer{}}, nil
}

// Start starts a pod informer for every twin namespace the consumer has on
// the provider and waits until they have synced. The informers run until
// ctx is done; informers started later for new twin namespaces too.
func (h *Handler) Start(ctx context.Context) error {
	h.mu.Lock()
	if h.started {
		h.mu.Unlock()
		return errors.New("podreflection: the handler is already started")
	}
	h.ctx, h.started, h.eventsSince = ctx, true, time.Now()
	h.mu.Unlock()
	_, err := h.syncAll(ctx)
	return err
}

// stopped is closed once the context Start was given is done; never
// before Start.
func (h *Handler) stopped() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ctx == nil {
		return nil
	}
	return h.ctx.Done()
}

// addresses is the current address translation.
func (h *Handler) addresses() *reflection.Addresses {
	if h.opts.Addresses == nil {
		return nil
	}
	return h.opts.Addresses()
}

// origin is the reflection origin of the pods of twin namespace twin.
func (h *Handler) origin(twin string) reflection.Origin {
	o := reflection.Origin{
		ClusterID:         h.opts.ConsumerClusterID,
		TwinNamespace:     twin,
		VirtualNodeLabels: h.opts.VirtualNodeLabels,
		HostIP:            h.opts.NodeIP,
		Addresses:         h.addresses(),
	}
	if h.opts.Policy != nil {
		if pol := h.opts.Policy(); pol != nil {
			o.NodePlacement, o.NodeSelector, o.Tolerations = pol.NodePlacement, pol.NodeSelector, pol.Tolerations
		}
	}
	return o
}

// resolve returns the Ready twin namespace of consumer namespace ns and
// makes sure its informer runs.
func (h *Handler) resolve(ns string) (*twinInformer, error) {
	twin, ok := h.opts.TwinNamespace(ns)
	if !ok || twin == "" {
		return nil, fmt.Errorf("namespace %q has no Ready twin namespace on provider %s: %w; check its NamespaceOffloading",
			ns, h.opts.ProviderClusterID, ErrNotOffloaded)
	}
	return h.informer(twin, ns)
}
