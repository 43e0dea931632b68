// Package virtualnode runs, on the consumer, one virtual node per provider:
// offload-<peer>, whose capacity is the provider's ResourceOffer, which is
// Ready while the provider serves it, and whose pods run in the provider.
//
// The Reconciler (controller.go) is thin: it decides whether a peer's
// runtime runs and with which credentials. The runtime (runtime.go) builds
// every client of the provider once, when it starts, and runs the peer's
// named steps, each restarted on its own: the node (node.go, in three
// phases: wait for the offer, register, follow; provider.go is its
// virtual-kubelet NodeProvider), the pod controller with its
// podreflection.Handler, whose own loops collect orphans and renew tokens,
// and object reflection (pods.go).
package virtualnode

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/providerclient"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/metrics"
)

// Reasons of the OutgoingPeering and VirtualNodeReady conditions.
const (
	ReasonEstablished         = "Established"
	ReasonNodeReady           = "NodeReady"
	ReasonProviderUnreachable = "ProviderUnreachable"
	ReasonStarting            = "Starting"
	ReasonDisabled            = "Disabled"
)

// DefaultPollInterval is how often the provider is pinged and the offer
// read when Reconciler.PollInterval is zero.
const DefaultPollInterval = 5 * time.Second

// secretCheckInterval is how often a running peer's kubeconfig Secret is
// compared with the one its node controller uses: Secrets are not watched,
// since the agent may read them in its own namespace only.
const secretCheckInterval = 30 * time.Second

// Reconciler keeps one virtual-kubelet node controller running for each
// authenticated ForeignCluster with outgoing peering enabled.
type Reconciler struct {
	// Client reads and updates ForeignClusters.
	Client client.Client
	// Reader reads the kubeconfig Secrets in Namespace, uncached.
	Reader client.Reader
	// Kube writes the virtual nodes and their Leases.
	Kube kubernetes.Interface
	// Namespace is the install namespace, which holds the kubeconfig Secrets.
	Namespace string
	// PollInterval is how often the provider is pinged; zero means DefaultPollInterval.
	PollInterval time.Duration

	// PodsKube reads the pods of the virtual nodes and writes their status;
	// it defaults to Kube. Give it a higher rate limit than Kube's.
	PodsKube kubernetes.Interface
	// ClusterID is this cluster's ID, the origin of the pods it offloads;
	// empty means reading it from the identity ConfigMap in Namespace.
	ClusterID string
	// NodeIP is the address of the virtual nodes: where this agent serves
	// their kubelet API, and the host IP of their pods. Optional.
	NodeIP string
	// KubeletPorts serves the virtual nodes' kubelet API, a port each;
	// nil publishes none.
	KubeletPorts KubeletPorts
	// PodWorkers is how many pods of one virtual node are brought to the
	// provider at once; zero means DefaultPodWorkers.
	PodWorkers int
	// Providers is the one source of the providers' credentials, shared
	// with the other consumer controllers; nil means a Set of its own over
	// Reader and Namespace.
	Providers *providerclient.Set

	// Network says this cluster runs the network fabric: the pods of each
	// peer whose ForeignCluster does not disable networking show their
	// addresses in this cluster's view of the peer, and none until the
	// tunnel is up.
	Network bool

	// Untainted registers the virtual nodes without the virtual-node taint
	// (virtualNodes.taint=false): every pod may be scheduled there, not
	// only those of offloaded namespaces, and the DaemonSet controller
	// keeps every DaemonSet off them.
	Untainted bool

	// TokenRenewInterval is how often the service-account tokens of
	// offloaded pods are checked for renewal; zero means
	// podreflection.DefaultTokenRenewInterval.
	TokenRenewInterval time.Duration

	mu    sync.Mutex
	peers map[string]*peerRuntime // by ForeignCluster name

	statusMu sync.Mutex // one VirtualNode status write at a time
}

// SetupWithManager registers the reconciler with mgr; the node controllers
// stop with the manager.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Reader == nil {
		r.Reader = mgr.GetAPIReader()
	}
	if r.Providers == nil {
		r.Providers = &providerclient.Set{Reader: r.Reader, Namespace: r.Namespace}
	}
	if r.Kube == nil {
		kube, err := kubernetes.NewForConfig(mgr.GetConfig())
		if err != nil {
			return fmt.Errorf("creating the client of the virtual nodes: %w", err)
		}
		r.Kube = kube
	}
	if r.PodsKube == nil {
		cfg := reflectionConfig(mgr.GetConfig())
		kube, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return fmt.Errorf("creating the client of the virtual nodes' pods: %w", err)
		}
		r.PodsKube = kube
	}
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		<-ctx.Done()
		r.stopAll()
		return nil
	})); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("virtualnode").
		For(&offloadv1alpha1.ForeignCluster{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// The credentials controller says when the credentials are there.
		Owns(&offloadv1alpha1.PeeringCredentials{}, builder.WithPredicates(authenticatedChanged())).
		Complete(r)
}

// authenticatedChanged passes the PeeringCredentials' creations and the
// updates that change their Authenticated condition.
func authenticatedChanged() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		o, ok1 := e.ObjectOld.(*offloadv1alpha1.PeeringCredentials)
		n, ok2 := e.ObjectNew.(*offloadv1alpha1.PeeringCredentials)
		return ok1 && ok2 && authenticated(o) != authenticated(n)
	}}
}

func authenticated(pc *offloadv1alpha1.PeeringCredentials) bool {
	return meta.IsStatusConditionTrue(pc.Status.Conditions, offloadv1alpha1.ConditionAuthenticated)
}

// +kubebuilder:rbac:groups="",resources=nodes,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=nodes/status,verbs=update;patch
// +kubebuilder:rbac:groups=coordination.k8s.io,resources=leases,verbs=get;create;update;delete
// +kubebuilder:rbac:groups=offload.io,resources=virtualnodes;virtualnodes/status,verbs=get;list;watch;create;patch

// Reconcile starts, restarts or stops the runtime of the ForeignCluster's
// peer (runtime.go): it only decides whether one should run, and with what.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var fc offloadv1alpha1.ForeignCluster
	if err := r.Client.Get(ctx, req.NamespacedName, &fc); err != nil {
		if apierrors.IsNotFound(err) {
			return ctrl.Result{}, r.remove(ctx, req.Name)
		}
		return ctrl.Result{}, err
	}
	if !fc.DeletionTimestamp.IsZero() || !fc.Spec.OutgoingPeering.Enabled {
		return ctrl.Result{}, r.disable(ctx, &fc)
	}
	var pc offloadv1alpha1.PeeringCredentials
	if err := r.Client.Get(ctx, req.NamespacedName, &pc); client.IgnoreNotFound(err) != nil {
		return ctrl.Result{}, err
	}
	if !authenticated(&pc) {
		r.stop(fc.Name)
		return ctrl.Result{}, nil
	}
	// The node and its Lease go before the ForeignCluster does.
	if controllerutil.AddFinalizer(&fc, offloadv1alpha1.FinalizerVirtualNode) {
		if err := r.Client.Update(ctx, &fc); err != nil {
			return ctrl.Result{}, fmt.Errorf("adding finalizer %s: %w", offloadv1alpha1.FinalizerVirtualNode, err)
		}
	}
	creds, err := r.Providers.Get(ctx, &fc)
	if errors.Is(err, providerclient.ErrNoCredentials) {
		r.stop(fc.Name)
		return ctrl.Result{RequeueAfter: secretCheckInterval}, nil
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	key := fc.Spec.ClusterID + "/" + fc.Spec.ClusterName + "/" + creds.Key()
	networked := r.Network && !fc.Spec.Networking.Disabled
	if networked {
		key += "/network"
	}
	if err := r.ensureVirtualNode(ctx, &fc); err != nil {
		return ctrl.Result{}, err
	}
	if r.running(fc.Name) == key {
		// Renewed credentials: the Set swapped the token in place, and the
		// running clients use it from their next request on.
		return ctrl.Result{RequeueAfter: secretCheckInterval}, nil
	}
	rt, err := newRuntime(&fc, creds, key, tunnelAddresses(r.Reader, r.Namespace, fc.Name, networked), r.Client.Scheme(), r.pollInterval())
	if err != nil {
		return ctrl.Result{}, err
	}
	r.stop(fc.Name)
	r.start(ctx, rt, r.steps(rt))
	return ctrl.Result{RequeueAfter: secretCheckInterval}, nil
}

// disable removes the virtual node of fc, which is deleted or no longer
// consumes its peer, and lets fc go.
func (r *Reconciler) disable(ctx context.Context, fc *offloadv1alpha1.ForeignCluster) error {
	if err := r.remove(ctx, fc.Name); err != nil {
		return err
	}
	if controllerutil.RemoveFinalizer(fc, offloadv1alpha1.FinalizerVirtualNode) {
		if err := r.Client.Update(ctx, fc); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("removing finalizer %s: %w", offloadv1alpha1.FinalizerVirtualNode, err)
		}
	}
	if fc.DeletionTimestamp.IsZero() && meta.FindStatusCondition(r.conditions(ctx, fc.Name), offloadv1alpha1.ConditionOfferRead) != nil {
		return r.setStatus(ctx, fc.Name, metav1.ConditionFalse, metav1.ConditionFalse, ReasonDisabled, "outgoing peering is disabled", false)
	}
	return nil
}

// remove stops the runtime of name, deletes its node and Lease, and drops
// its pod reflection's metrics.
func (r *Reconciler) remove(ctx context.Context, name string) error {
	r.stop(name)
	metrics.ForPeer(name).Forget()
	node := offloadv1alpha1.VirtualNodeName(name)
	if r.KubeletPorts != nil {
		r.KubeletPorts.ForgetNode(node)
	}
	if err := r.Kube.CoreV1().Nodes().Delete(ctx, node, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting virtual node %q: %w", node, err)
	}
	err := r.Kube.CoordinationV1().Leases(corev1.NamespaceNodeLease).Delete(ctx, node, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("deleting the Lease of virtual node %q: %w", node, err)
	}
	return nil
}
