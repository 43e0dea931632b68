package resourceoffer

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// DefaultSharingPercentage is the share of its resources a provider
// offers each tenant unless told otherwise.
const DefaultSharingPercentage = 50

// Basis is what an offer is a share of.
type Basis string

const (
	// BasisAllocatable, the default, offers a share of the lent nodes'
	// allocatable resources. It is the capacity a provider lends, as a
	// virtual kubelet's node would show: the provider's scheduler places
	// the tenant's pods there and leaves pending what does not fit beside
	// its own. It needs no pod of the cluster: the provider's own pods
	// cost the agent nothing, and its bursts change no offer.
	BasisAllocatable Basis = "allocatable"
	// BasisFree offers a share of the lent nodes' free resources: their
	// allocatable minus what the bound pods request, but the tenant's own.
	// A consumer's scheduler then sees what really fits, for the price of
	// a watch of every bound pod of the provider (about a millisecond of
	// the agent's CPU for each pod the provider runs) and an offer that
	// changes with the provider's own load.
	BasisFree Basis = "free"
)

// Bases are the valid values of Basis, the default first.
var Bases = []Basis{BasisAllocatable, BasisFree}

// Validate says whether b is one of Bases ("" is the default).
func (b Basis) Validate() error {
	if b == "" || slices.Contains(Bases, b) {
		return nil
	}
	return fmt.Errorf("the offer basis must be %q or %q, got %q", BasisAllocatable, BasisFree, b)
}

// ControllerName names the controller in logs and metrics.
const ControllerName = "resourceoffer"

// namespaceRetry is how long a tenant waits for its namespace to appear.
const namespaceRetry = 5 * time.Second

// Reconciler publishes, for each Tenant, a ResourceOffer named after this
// cluster in the tenant namespace, and keeps it in step with the resources
// of the nodes lent to the tenant (their allocatable, or what is free of
// them: Basis).
//
// +kubebuilder:rbac:groups=offload.io,resources=tenants,verbs=get;list;watch
// +kubebuilder:rbac:groups=offload.io,resources=tenants/finalizers,verbs=update
// +kubebuilder:rbac:groups=offload.io,resources=resourceoffers,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups=offload.io,resources=resourceoffers/status,verbs=get;update
// +kubebuilder:rbac:groups="",resources=nodes;pods;namespaces,verbs=get;list;watch
//
// It also gets ConfigMap offload-cluster-identity in the agent namespace,
// uncached, as the manager's identity check does.
type Reconciler struct {
	// Client reads Tenants, Nodes, Pods and Namespaces (the manager's
	// cache) and writes ResourceOffers.
	Client client.Client
	// Namespace is the agent's namespace, which holds the cluster identity.
	Namespace string
	// SharingPercentage is the percentage of the resources (Basis) offered
	// to each tenant.
	SharingPercentage int
	// Basis is what the offer is a share of: BasisAllocatable when empty.
	Basis Basis

	// identityReader reads the identity ConfigMap uncached, so that the
	// cache does not watch every ConfigMap of the cluster. SetupWithManager
	// sets it to the manager's API reader; when nil, Client is used.
	identityReader client.Reader

	// skipNameValidation lets tests start the controller more than once
	// in a process (go test -count=2).
	skipNameValidation bool

	// usage is what the pods request, node by node, kept up to date by
	// the events of the manager's pod informer once usageSynced says it
	// has seen every pod. SetupWithManager sets both for BasisFree;
	// without them, each count of the free resources lists every pod.
	usage       *Usage
	usageSynced func() bool

	mu       sync.Mutex
	identity *peering.Identity
	// counts is each Tenant's last count of the free resources, by name.
	counts map[string]count
	// queue is the controller's, once it has started: usageChanged wakes
	// the Tenants through it.
	queue workqueue.TypedRateLimitingInterface[reconcile.Request]
}

// count is a Tenant's share of the free resources, when it was counted,
// and under which of its policies (a new policy may lend other nodes).
type count struct {
	share  corev1.ResourceList
	at     time.Time
	policy offloadv1alpha1.ConsumerPolicy
	// clusterID is the Tenant's: its own pods leave its share as it is.
	clusterID string
	// stale says the pods' usage changed since the count, and the Tenant
	// was woken for a new one: the next count is due, so further changes
	// need not wake it again.
	stale bool
}

// SetupWithManager registers the controller with mgr. It reconciles every
// Tenant when a Node changes in a way that changes the lent resources, and,
// for BasisFree, the Tenants whose share a pod's event changed
// (usageChanged). With BasisAllocatable it never reads a pod.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.SharingPercentage < 0 || r.SharingPercentage > 100 {
		return fmt.Errorf("the sharing percentage must be between 0 and 100, got %d", r.SharingPercentage)
	}
	if err := r.Basis.Validate(); err != nil {
		return err
	}
	r.identityReader = mgr.GetAPIReader()
	if r.Basis == BasisFree {
		pods, err := mgr.GetCache().GetInformer(context.Background(), &corev1.Pod{})
		if err != nil {
			return fmt.Errorf("setting up the %s controller: the pod informer: %w", ControllerName, err)
		}
		usage := NewUsage()
		registration, err := pods.AddEventHandler(usage.Handler(r.usageChanged))
		if err != nil {
			return fmt.Errorf("setting up the %s controller: counting the pods' requests: %w", ControllerName, err)
		}
		r.usage, r.usageSynced = usage, registration.HasSynced
	}
	enqueueTenants := handler.EnqueueRequestsFromMapFunc(r.allTenants)
	err := ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		WithOptions(controller.Options{SkipNameValidation: &r.skipNameValidation}).
		For(&offloadv1alpha1.Tenant{}).
		Owns(&offloadv1alpha1.ResourceOffer{}).
		Watches(&corev1.Node{}, enqueueTenants, builder.WithPredicates(nodeChanged())).
		WatchesRawSource(source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.queue = q
			return nil
		})).
		Complete(r)
	if err != nil {
		return fmt.Errorf("setting up the %s controller: %w", ControllerName, err)
	}
	return nil
}

// Reconcile creates or updates the ResourceOffer of one Tenant.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	var tenant offloadv1alpha1.Tenant
	if err := r.Client.Get(ctx, req.NamespacedName, &tenant); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.Name)
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !tenant.DeletionTimestamp.IsZero() {
		r.forget(req.Name)
		return reconcile.Result{}, nil
	}
	var ns corev1.Namespace
	if err := r.Client.Get(ctx, types.NamespacedName{Name: tenant.Spec.TenantNamespace}, &ns); err != nil {
		if apierrors.IsNotFound(err) {
			log.V(1).Info("Waiting for the tenant namespace", "tenant", klog.KObj(&tenant), "namespace", tenant.Spec.TenantNamespace)
			return reconcile.Result{RequeueAfter: namespaceRetry}, nil
		}
		return reconcile.Result{}, fmt.Errorf("reading tenant namespace %q: %w", tenant.Spec.TenantNamespace, err)
	}
	if !ns.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}

	if wait := r.throttle(ctx, tenant.Spec.TenantNamespace); wait > 0 {
		return reconcile.Result{RequeueAfter: wait}, nil
	}
	share, recount, err := r.share(ctx, &tenant)
	if err != nil {
		return reconcile.Result{}, err
	}
	// A share from the last count stands for the events since: they are
	// counted when the next count is due.
	later := reconcile.Result{RequeueAfter: recount}
	id, err := r.readIdentity(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}

	offer := &offloadv1alpha1.ResourceOffer{ObjectMeta: metav1.ObjectMeta{Name: id.Name, Namespace: tenant.Spec.TenantNamespace}}
	changed := false
	op, err := controllerutil.CreateOrUpdate(ctx, r.Client, offer, func() error {
		changed = !sameResources(offer.Spec.Resources, share)
		offer.Spec.ClusterID = id.ID
		offer.Spec.ClusterName = id.Name
		offer.Spec.Resources = share
		offer.Spec.Policy = tenant.Spec.Policy
		return controllerutil.SetControllerReference(&tenant, offer, r.Client.Scheme())
	})
	if err != nil {
		return reconcile.Result{}, fmt.Errorf("publishing resource offer %s/%s: %w", offer.Namespace, offer.Name, err)
	}
	if !changed && offer.Status.LastUpdate != nil && meta.IsStatusConditionTrue(offer.Status.Conditions, offloadv1alpha1.ConditionReady) {
		return later, nil
	}
	now := metav1.Now()
	offer.Status.LastUpdate = &now
	meta.SetStatusCondition(&offer.Status.Conditions, metav1.Condition{
		Type:               offloadv1alpha1.ConditionReady,
		Status:             metav1.ConditionTrue,
		Reason:             "Published",
		Message:            fmt.Sprintf("%d%% of the %s resources of cluster %s", r.SharingPercentage, r.basis(), id.Name),
		ObservedGeneration: offer.Generation,
	})
	if err := r.Client.Status().Update(ctx, offer); err != nil {
		return reconcile.Result{}, fmt.Errorf("updating the status of resource offer %s/%s: %w", offer.Namespace, offer.Name, err)
	}
	log.Info("Published resource offer", "tenant", klog.KObj(&tenant), "offer", klog.KObj(offer), "operation", op,
		"cpu", share.Cpu().String(), "memory", share.Memory().String(), "pods", share.Pods().String())
	return later, nil
}

// basis is r.Basis, BasisAllocatable when empty.
func (r *Reconciler) basis() Basis {
	if r.Basis == "" {
		return BasisAllocatable
	}
	return r.Basis
}

// share returns the tenant's share of the lent resources, counted at most
// once per MinUpdateInterval, and how long until the next count when it
// is the last count's. Counting lists every node. For BasisFree, it reads
// the pods' requests from the Usage the pod informer keeps (every bound
// pod of the cluster until it has synced), and the tenant's own pods do
// not change it: in an
// offloaded burst every pod event would recount and find the offer
// unchanged, so that the LastUpdate throttle never held and the counts ran
// back to back.
func (r *Reconciler) share(ctx context.Context, tenant *offloadv1alpha1.Tenant) (corev1.ResourceList, time.Duration, error) {
	r.mu.Lock()
	last, ok := r.counts[tenant.Name]
	if age := time.Since(last.at); ok && age < MinUpdateInterval && last.policy.Equal(tenant.Spec.Policy) {
		r.mu.Unlock()
		return last.share, MinUpdateInterval - age, nil
	}
	// A change from now on is one this count may miss: it marks the
	// count stale again, and wakes the Tenant (a Tenant counted for the
	// first time is listed already, with no share yet, to be woken too).
	if r.counts == nil {
		r.counts = map[string]count{}
	}
	last.stale, last.clusterID = false, tenant.Spec.ClusterID
	r.counts[tenant.Name] = last
	r.mu.Unlock()
	// Read-only lists of the whole cache: no deep copies.
	var nodes corev1.NodeList
	if err := r.Client.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return nil, 0, fmt.Errorf("listing nodes: %w", err)
	}
	var free corev1.ResourceList
	switch {
	case r.basis() == BasisAllocatable:
		free = Allocatable(nodes.Items, tenant.Spec.Policy)
	case r.usage != nil && r.usageSynced():
		free = freeOf(nodes.Items, r.usage, tenant.Spec.ClusterID, tenant.Spec.Policy)
	default:
		var pods corev1.PodList
		if err := r.Client.List(ctx, &pods, client.UnsafeDisableDeepCopy); err != nil {
			return nil, 0, fmt.Errorf("listing pods: %w", err)
		}
		free = Free(nodes.Items, pods.Items, tenant.Spec.ClusterID, tenant.Spec.Policy)
	}
	share := Share(free, r.SharingPercentage)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.counts[tenant.Name] = count{share: share, at: time.Now(), policy: *tenant.Spec.Policy.DeepCopy(),
		clusterID: tenant.Spec.ClusterID, stale: r.counts[tenant.Name].stale}
	return share, 0, nil
}

// usageChanged wakes, for a change of what the pods of origin use, the
// Tenants whose share it changes: all but the one origin names (its own
// pods leave its share as it is), and only those whose last count is not
// already stale. Every pod event of the cluster that changes a count comes
// here; it costs a look at the counts, and at most one reconcile per
// Tenant and count: a Tenant woken within MinUpdateInterval of its last
// count waits for the next (share).
func (r *Reconciler) usageChanged(origin string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.queue == nil {
		return
	}
	for name, c := range r.counts {
		if c.stale || origin != "" && origin == c.clusterID {
			continue
		}
		c.stale = true
		r.counts[name] = c
		r.queue.Add(reconcile.Request{NamespacedName: types.NamespacedName{Name: name}})
	}
}

// forget drops the count of a Tenant that went.
func (r *Reconciler) forget(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.counts, name)
}

// MinUpdateInterval is the least time between two changes of a
// ResourceOffer. Free resources change with every pod that starts or ends;
// recomputing and republishing the offer each time would cost the provider
// a list of every pod and two writes per pod, and each consumer a virtual
// node update, which under a burst of pods is most of the work.
var MinUpdateInterval = 5 * time.Second

// throttle returns how long to wait before the offer in namespace ns may
// change again: zero when it may change now.
func (r *Reconciler) throttle(ctx context.Context, ns string) time.Duration {
	id, err := r.readIdentity(ctx)
	if err != nil {
		return 0
	}
	var offer offloadv1alpha1.ResourceOffer
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: id.Name}, &offer); err != nil || offer.Status.LastUpdate == nil {
		return 0
	}
	return MinUpdateInterval - time.Since(offer.Status.LastUpdate.Time)
}

// readIdentity reads this cluster's identity once; its ID never changes, and
// a renamed cluster is picked up when the agent restarts.
func (r *Reconciler) readIdentity(ctx context.Context) (peering.Identity, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.identity != nil {
		return *r.identity, nil
	}
	reader := r.identityReader
	if reader == nil {
		reader = r.Client
	}
	id, err := peering.ReadIdentity(ctx, reader, r.Namespace)
	if err != nil {
		return peering.Identity{}, err
	}
	r.identity = &id
	return id, nil
}

// allTenants maps any event to a request for every Tenant.
func (r *Reconciler) allTenants(ctx context.Context, _ client.Object) []reconcile.Request {
	// Only the names are read: the cache's own objects, not copies (every
	// event of a provider's own pods comes here, and copying the Tenants
	// was a tenth of what those events cost the agent).
	var tenants offloadv1alpha1.TenantList
	if err := r.Client.List(ctx, &tenants, client.UnsafeDisableDeepCopy); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing tenants to refresh their resource offers")
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(tenants.Items))
	for _, t := range tenants.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Name: t.Name}})
	}
	return reqs
}

// nodeChanged lets through the Node events that can change the free
// resources: not the periodic status heartbeats.
func nodeChanged() predicate.Funcs {
	return predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			old, okOld := e.ObjectOld.(*corev1.Node)
			cur, okNew := e.ObjectNew.(*corev1.Node)
			if !okOld || !okNew {
				return true
			}
			return !maps.Equal(old.Labels, cur.Labels) ||
				!slices.EqualFunc(old.Spec.Taints, cur.Spec.Taints, func(a, b corev1.Taint) bool { return a.MatchTaint(&b) }) ||
				old.Spec.Unschedulable != cur.Spec.Unschedulable ||
				ready(*old) != ready(*cur) ||
				!sameResources(old.Status.Allocatable, cur.Status.Allocatable)
		},
		GenericFunc: func(event.GenericEvent) bool { return false },
	}
}

// sameResources compares quantities by value, so "1" and "1000m" are equal.
func sameResources(a, b corev1.ResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for r, q := range a {
		other, ok := b[r]
		if !ok || q.Cmp(other) != 0 {
			return false
		}
	}
	return true
}
