// Package namespaceoffloading runs, on the consumer, the controller of
// NamespaceOffloadings: for each offloaded namespace it asks every selected
// provider for a twin namespace, through a RemoteNamespace in the tenant
// namespace the consumer has there, labels the namespace for the scheduling
// webhook, and reports the phase of each twin namespace and a Ready
// condition. Deleting the NamespaceOffloading deletes the RemoteNamespaces,
// and so the twin namespaces, before the label goes.
package namespaceoffloading

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/providerclient"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

const (
	// ControllerName names the controller in logs and metrics.
	ControllerName = "namespaceoffloading"
)

// Reasons of the Ready condition of a NamespaceOffloading.
const (
	// ReasonRemoteNamespacesReady: every selected peer has its twin namespace.
	ReasonRemoteNamespacesReady = "RemoteNamespacesReady"
	// ReasonPodsStayLocal: podOffloadingStrategy Local needs no peer.
	ReasonPodsStayLocal = "PodsStayLocal"
	// ReasonNoPeer: no usable peer matches the cluster selector.
	ReasonNoPeer = "NoPeer"
	// ReasonRemoteNamespaceFailed: a provider refused the twin namespace.
	ReasonRemoteNamespaceFailed = "RemoteNamespaceFailed"
	// ReasonPending: twin namespaces are on their way.
	ReasonPending = "Pending"
	// ReasonDeleting: the NamespaceOffloading is deleted and the twin namespaces go.
	ReasonDeleting = "Deleting"
)

const (
	// pendingRequeue is how often a NamespaceOffloading that is not Ready
	// is looked at again: the RemoteNamespaces on the providers are not
	// watched.
	pendingRequeue = 10 * time.Second
	// minPendingRequeue is how soon a new one is.
	minPendingRequeue = 500 * time.Millisecond
	// readyRequeue is how often a Ready one is.
	readyRequeue = time.Minute
)

// Reconciler serves the NamespaceOffloadings of this cluster, as a consumer.
//
// It reads NamespaceOffloadings, ForeignClusters and virtual Nodes, patches
// Namespaces (the LabelOffloaded label), reads the identity ConfigMap and
// the peers' kubeconfig Secrets in Namespace only, and manages
// RemoteNamespaces on the providers with the peers' credentials.
type Reconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// Reader reads the identity ConfigMap and the kubeconfig Secrets in
	// Namespace, uncached: the cache must not watch Secrets cluster-wide.
	Reader client.Reader
	// Namespace is the install namespace.
	Namespace string
	// Providers is the one source of the providers' credentials, shared
	// with the virtual nodes; nil means a Set of its own over Reader and
	// Namespace.
	Providers *providerclient.Set

	mu       sync.Mutex
	identity *peering.Identity

	// skipNameValidation lets tests start the controller more than once
	// in a process.
	skipNameValidation bool
}

// SetupWithManager registers the controller with mgr. Besides
// NamespaceOffloadings it watches ForeignClusters and virtual nodes, which
// decide which peers are selected; the RemoteNamespaces on the providers
// are polled.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Reader == nil {
		r.Reader = mgr.GetAPIReader()
	}
	if r.Providers == nil {
		r.Providers = &providerclient.Set{Reader: r.Reader, Namespace: r.Namespace}
	}
	virtual := builder.WithPredicates(predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetLabels()[offloadv1alpha1.LabelType] == offloadv1alpha1.TypeVirtualNode
	}))
	all := handler.EnqueueRequestsFromMapFunc(r.all)
	err := ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		WithOptions(controller.Options{SkipNameValidation: &r.skipNameValidation}).
		For(&offloadv1alpha1.NamespaceOffloading{}).
		Watches(&offloadv1alpha1.ForeignCluster{}, all).
		Watches(&corev1.Node{}, all, virtual).
		Complete(r)
	if err != nil {
		return fmt.Errorf("setting up the %s controller: %w", ControllerName, err)
	}
	return nil
}

// all maps any event to every NamespaceOffloading.
func (r *Reconciler) all(ctx context.Context, _ client.Object) []reconcile.Request {
	var list offloadv1alpha1.NamespaceOffloadingList
	if err := r.Client.List(ctx, &list); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing NamespaceOffloadings")
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, no := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: no.Namespace, Name: no.Name}})
	}
	return reqs
}

// Reconcile asks the selected providers for the twin namespaces of one
// NamespaceOffloading and reports them, or takes them back when it is deleted.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var no offloadv1alpha1.NamespaceOffloading
	if err := r.Client.Get(ctx, req.NamespacedName, &no); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !no.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, &no)
	}
	if no.Name != offloadv1alpha1.NamespaceOffloadingName {
		// The CRD refuses other names; nothing to do should one slip by.
		return reconcile.Result{}, nil
	}
	if controllerutil.AddFinalizer(&no, offloadv1alpha1.FinalizerNamespaceOffloading) {
		if err := r.Client.Update(ctx, &no); err != nil {
			return reconcile.Result{}, fmt.Errorf("adding the finalizer to NamespaceOffloading %s: %w", klog.KObj(&no), err)
		}
	}
	if err := r.label(ctx, no.Namespace, true); err != nil {
		return reconcile.Result{}, err
	}
	if err := r.grant(ctx, no.Namespace, true); err != nil {
		return reconcile.Result{}, err
	}
	id, err := r.consumer(ctx)
	if err != nil {
		return reconcile.Result{}, err
	}
	peers, err := r.peers(ctx, no.Spec.ClusterSelector)
	if err != nil {
		return reconcile.Result{}, err
	}
	entries := r.sync(ctx, &no, id, peers)
	ready := readiness(&no, entries)
	if err := r.setStatus(ctx, &no, entries, ready); err != nil {
		return reconcile.Result{}, err
	}
	if ready.Status == metav1.ConditionTrue {
		return reconcile.Result{RequeueAfter: readyRequeue}, nil
	}
	return reconcile.Result{RequeueAfter: pendingDelay(&no, time.Now())}, nil
}

// pendingDelay is when a NamespaceOffloading that is not Ready is looked at
// again: half the time since it last changed, between minPendingRequeue and
// pendingRequeue, so that a new one is Ready within a second of its twin
// namespaces and one that stays pending costs little.
func pendingDelay(no *offloadv1alpha1.NamespaceOffloading, now time.Time) time.Duration {
	since := no.CreationTimestamp.Time
	if c := meta.FindStatusCondition(no.Status.Conditions, offloadv1alpha1.ConditionReady); c != nil && c.LastTransitionTime.After(since) {
		since = c.LastTransitionTime.Time
	}
	return backoff(since, now)
}

// backoff is half the time since since, between minPendingRequeue and pendingRequeue.
func backoff(since, now time.Time) time.Duration {
	return min(max(now.Sub(since)/2, minPendingRequeue), pendingRequeue)
}

// finalize deletes the RemoteNamespace of every peer that may have one and
// waits until the providers let them go, which they do once the twin
// namespaces are deleted; then it removes the label of the namespace and
// the finalizer.
//
// A peer with no ForeignCluster or no credentials any more is skipped: it
// was unpeered, and the provider garbage-collects the twin namespaces of
// consumers it has no tenant for. A provider that does not answer is asked
// again every pendingRequeue for as long as it takes, and its entry says
// so; the namespace keeps its label meanwhile, since its twin namespace may
// still run pods. Unpeering that provider, or removing the finalizer by
// hand, ends the wait.
func (r *Reconciler) finalize(ctx context.Context, no *offloadv1alpha1.NamespaceOffloading) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(no, offloadv1alpha1.FinalizerNamespaceOffloading) {
		return reconcile.Result{}, nil
	}
	log := ctrl.LoggerFrom(ctx)
	peers, err := r.peers(ctx, nil)
	if err != nil {
		return reconcile.Result{}, err
	}
	entries, pending := r.release(ctx, no, peers)
	ready := metav1.Condition{Type: offloadv1alpha1.ConditionReady, Status: metav1.ConditionFalse, Reason: ReasonDeleting,
		Message: fmt.Sprintf("deleting the twin namespaces of namespace %s", no.Namespace)}
	if err := r.setStatus(ctx, no, entries, ready); err != nil {
		return reconcile.Result{}, err
	}
	if pending {
		return reconcile.Result{RequeueAfter: backoff(no.DeletionTimestamp.Time, time.Now())}, nil
	}
	if err := r.label(ctx, no.Namespace, false); err != nil {
		return reconcile.Result{}, err
	}
	if err := r.grant(ctx, no.Namespace, false); err != nil {
		return reconcile.Result{}, err
	}
	controllerutil.RemoveFinalizer(no, offloadv1alpha1.FinalizerNamespaceOffloading)
	if err := r.Client.Update(ctx, no); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	log.Info("Unoffloaded namespace", "namespace", no.Namespace)
	return reconcile.Result{}, nil
}

// label sets or removes LabelOffloaded on namespace ns. A namespace that
// is gone needs neither.
func (r *Reconciler) label(ctx context.Context, ns string, offloaded bool) error {
	var n corev1.Namespace
	if err := r.Client.Get(ctx, types.NamespacedName{Name: ns}, &n); err != nil {
		return client.IgnoreNotFound(err)
	}
	value, present := n.Labels[offloadv1alpha1.LabelOffloaded]
	if offloaded && value == "true" || !offloaded && !present {
		return nil
	}
	patch := client.MergeFrom(n.DeepCopy())
	if offloaded {
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels[offloadv1alpha1.LabelOffloaded] = "true"
	} else {
		delete(n.Labels, offloadv1alpha1.LabelOffloaded)
	}
	if err := r.Client.Patch(ctx, &n, patch); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("labelling namespace %s: %w", ns, err))
	}
	return nil
}

// consumer returns this cluster's identity, read once.
func (r *Reconciler) consumer(ctx context.Context) (peering.Identity, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.identity != nil {
		return *r.identity, nil
	}
	id, err := peering.ReadIdentity(ctx, r.Reader, r.Namespace)
	if err != nil {
		return peering.Identity{}, err
	}
	if id.Name == "" {
		return peering.Identity{}, fmt.Errorf("the cluster identity ConfigMap %s/%s has no clusterName: run kubectl offload upgrade to restore it", r.Namespace, offloadv1alpha1.IdentityConfigMap)
	}
	r.identity = &id
	return id, nil
}

// setStatus records entries and the Ready condition when they change anything.
func (r *Reconciler) setStatus(ctx context.Context, no *offloadv1alpha1.NamespaceOffloading, entries []offloadv1alpha1.RemoteNamespaceStatus, ready metav1.Condition) error {
	before := no.Status.DeepCopy()
	no.Status.RemoteNamespaces = entries
	ready.ObservedGeneration = no.Generation
	meta.SetStatusCondition(&no.Status.Conditions, ready)
	if equality.Semantic.DeepEqual(before, &no.Status) {
		return nil
	}
	if err := r.Client.Status().Update(ctx, no); err != nil {
		return fmt.Errorf("updating the status of NamespaceOffloading %s: %w", klog.KObj(no), err)
	}
	return nil
}
