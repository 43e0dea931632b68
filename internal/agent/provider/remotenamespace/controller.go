// Package remotenamespace runs, on a provider, the controller of
// RemoteNamespaces: for each one a consumer puts in its tenant namespace it
// creates the twin namespace, a ResourceQuota matching the tenant's
// ResourceOffer, and a RoleBinding that lets the consumer's ServiceAccount
// run workloads there and nowhere else. Deleting the RemoteNamespace deletes
// the twin namespace and the remote pods in it; twin namespaces whose
// consumer has no Tenant any more are garbage-collected.
package remotenamespace

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
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
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

const (
	// ControllerName names the controller in logs and metrics.
	ControllerName = "remotenamespace"
	// AnnotationRemoteNamespace, on a twin namespace and on the objects the
	// controller puts in it, names the RemoteNamespace they serve as
	// <tenant namespace>/<name>.
	AnnotationRemoteNamespace = "offload.io/remote-namespace"
)

// Reasons of the Ready condition of a RemoteNamespace.
const (
	// ReasonTwinNamespaceReady: the namespace, its quota and RoleBinding are in place.
	ReasonTwinNamespaceReady = "TwinNamespaceReady"
	// ReasonInvalidRequest: the request is refused; the message says why.
	ReasonInvalidRequest = "InvalidRequest"
	// ReasonNamespaceTaken: the target namespace exists and is not this consumer's.
	ReasonNamespaceTaken = "NamespaceTaken"
	// ReasonWaitingForOffer: the tenant has no ResourceOffer yet to size the quota.
	ReasonWaitingForOffer = "WaitingForOffer"
	// ReasonNamespaceTerminating: an earlier twin namespace of the same name is still being deleted.
	ReasonNamespaceTerminating = "NamespaceTerminating"
	// ReasonDeleting: the RemoteNamespace is deleted and its twin namespace goes with it.
	ReasonDeleting = "Deleting"
)

const (
	// retryWait is how long a request waits for a namespace to go or an
	// offer to come before looking again; watches usually come first.
	retryWait = 5 * time.Second
	// takenRetry is how often a request refused for a taken name looks
	// again, since the foreign namespace it waits for is not watched.
	takenRetry = time.Minute
)

// Reconciler serves the RemoteNamespaces of every tenant.
//
// It reads Tenants, RemoteNamespaces and ResourceOffers, creates and
// deletes Namespaces, and manages RoleBindings, ResourceQuotas and
// LimitRanges in twin namespaces; to create the RoleBinding it needs bind
// on ClusterRole RemoteWorkloadsRole (see the chart).
type Reconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
	// APIReader reads the API server's EndpointSlice, which the agent may
	// get by name only (no cache).
	APIReader client.Reader
	// Namespace is the agent's install namespace, never given to a consumer.
	Namespace string
	// Reserved are more namespaces never given to a consumer, besides the
	// built-in ones and DefaultReservedNamespaces.
	Reserved []string
	// PodCIDRs are this cluster's pod CIDRs, and FlatCIDRs what its admin
	// adds for consumers whose pods share a flat network with it. With the
	// network fabric each tenant's views are added. They bound where a
	// tenant's EndpointSlices may point (AnnotationEndpointCIDRs), and
	// FlatCIDRs and the views are let in by NetworkPolicyName.
	PodCIDRs, FlatCIDRs []netip.Prefix

	// skipNameValidation lets tests start the controller more than once
	// in a process.
	skipNameValidation bool
}

// SetupWithManager registers the controller with mgr. Besides
// RemoteNamespaces it watches ResourceOffers, to resize quotas, and the
// twin namespaces and the objects the controller made in them, to repair
// them.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	owned := builder.WithPredicates(predicate.NewPredicateFuncs(isManaged))
	byAnnotation := handler.EnqueueRequestsFromMapFunc(requestFromAnnotation)
	err := ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		WithOptions(controller.Options{SkipNameValidation: &r.skipNameValidation}).
		For(&offloadv1alpha1.RemoteNamespace{}).
		Watches(&offloadv1alpha1.ResourceOffer{}, handler.EnqueueRequestsFromMapFunc(r.requestsOfTenantNamespace)).
		Watches(&offloadv1alpha1.Tenant{}, handler.EnqueueRequestsFromMapFunc(r.requestsOfTenant)).
		Watches(&offloadv1alpha1.Tunnel{}, handler.EnqueueRequestsFromMapFunc(r.requestsOfTunnel)).
		Watches(&corev1.Namespace{}, byAnnotation, owned).
		Watches(&rbacv1.RoleBinding{}, byAnnotation, owned).
		Watches(&corev1.ResourceQuota{}, r.quotaEvents(), owned).
		Watches(&corev1.LimitRange{}, byAnnotation, owned).
		Watches(&networkingv1.NetworkPolicy{}, byAnnotation, owned).
		Watches(&schedulingv1.PriorityClass{}, handler.EnqueueRequestsFromMapFunc(r.requestsOfAll), builder.WithPredicates(defaultChanged)).
		Watches(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(r.requestsOfAll), builder.WithPredicates(publicAddressesChanged)).
		Complete(r)
	if err != nil {
		return fmt.Errorf("setting up the %s controller: %w", ControllerName, err)
	}
	return nil
}

// outcome is where a reconciliation left a RemoteNamespace.
type outcome struct {
	phase   offloadv1alpha1.RemoteNamespacePhase
	reason  string
	message string
	// retry, when set, asks to look again after that long.
	retry time.Duration
}

// Reconcile brings the twin namespace of one RemoteNamespace, with its
// quota and RoleBinding, in line with the request, or deletes it.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var rn offloadv1alpha1.RemoteNamespace
	if err := r.Client.Get(ctx, req.NamespacedName, &rn); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if !rn.DeletionTimestamp.IsZero() {
		return r.finalize(ctx, &rn)
	}
	tenant, err := r.validate(ctx, &rn)
	var refused *refusal
	if errors.As(err, &refused) {
		return reconcile.Result{}, r.setStatus(ctx, &rn, outcome{phase: offloadv1alpha1.RemoteNamespaceFailed, reason: ReasonInvalidRequest, message: refused.message})
	}
	if err != nil {
		return reconcile.Result{}, err
	}
	if controllerutil.AddFinalizer(&rn, offloadv1alpha1.FinalizerRemoteNamespace) {
		if err := r.Client.Update(ctx, &rn); err != nil {
			return reconcile.Result{}, fmt.Errorf("adding the finalizer to RemoteNamespace %s: %w", klog.KObj(&rn), err)
		}
	}
	o, err := r.ensure(ctx, &rn, tenant)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := r.setStatus(ctx, &rn, o); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{RequeueAfter: o.retry}, nil
}

// ensure creates or repairs, in order, the twin namespace, its quota,
// LimitRange and NetworkPolicy, and last the RoleBinding, so that the consumer never gets a
// namespace without a quota.
func (r *Reconciler) ensure(ctx context.Context, rn *offloadv1alpha1.RemoteNamespace, tenant *offloadv1alpha1.Tenant) (outcome, error) {
	if o, err := r.ensureNamespace(ctx, rn, tenant); o != nil || err != nil {
		return deref(o), err
	}
	offer, err := r.offer(ctx, rn.Namespace)
	if err != nil {
		return outcome{}, err
	}
	if offer == nil {
		return outcome{phase: offloadv1alpha1.RemoteNamespacePending, reason: ReasonWaitingForOffer, retry: retryWait,
			message: fmt.Sprintf("waiting for this cluster's ResourceOffer in namespace %s to size the quota of namespace %s", rn.Namespace, rn.Spec.TargetNamespace)}, nil
	}
	if err := r.ensureQuota(ctx, rn, offer, tenant.Spec.Policy.Storage); err != nil {
		return outcome{}, err
	}
	if err := r.ensureLimitRange(ctx, rn, offer, tenant.Spec.Policy.UnlimitedContainers); err != nil {
		return outcome{}, err
	}
	addrs, err := r.addressesOf(ctx, tenant)
	if err != nil {
		return outcome{}, err
	}
	if err := r.ensureNetworkPolicy(ctx, rn, tenant, addrs); err != nil {
		return outcome{}, err
	}
	if err := r.ensureRoleBinding(ctx, rn); err != nil {
		return outcome{}, err
	}
	return outcome{phase: offloadv1alpha1.RemoteNamespaceReady, reason: ReasonTwinNamespaceReady,
		message: fmt.Sprintf("namespace %s runs the pods of namespace %s of consumer %s", rn.Spec.TargetNamespace, rn.Spec.SourceNamespace, tenant.Spec.ClusterName)}, nil
}

func deref(o *outcome) outcome {
	if o == nil {
		return outcome{}
	}
	return *o
}

// finalize deletes the twin namespace of a deleted RemoteNamespace, waits
// until it is gone, then lets the RemoteNamespace go. A namespace that is
// not this request's twin is left alone.
func (r *Reconciler) finalize(ctx context.Context, rn *offloadv1alpha1.RemoteNamespace) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(rn, offloadv1alpha1.FinalizerRemoteNamespace) {
		return reconcile.Result{}, nil
	}
	log := ctrl.LoggerFrom(ctx)
	if err := r.setStatus(ctx, rn, outcome{phase: offloadv1alpha1.RemoteNamespaceTerminating, reason: ReasonDeleting,
		message: fmt.Sprintf("deleting namespace %s and the pods in it", rn.Spec.TargetNamespace)}); err != nil {
		return reconcile.Result{}, err
	}
	ns, err := r.getNamespace(ctx, rn.Spec.TargetNamespace)
	if err != nil {
		return reconcile.Result{}, err
	}
	if ns != nil && owns(ns, rn) {
		if ns.DeletionTimestamp.IsZero() {
			if err := deleteNamespace(ctx, r.Client, ns); err != nil {
				return reconcile.Result{}, err
			}
			log.Info("Deleting twin namespace", "namespace", ns.Name, "remoteNamespace", klog.KObj(rn))
		}
		return reconcile.Result{RequeueAfter: retryWait}, nil
	}
	controllerutil.RemoveFinalizer(rn, offloadv1alpha1.FinalizerRemoteNamespace)
	if err := r.Client.Update(ctx, rn); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	log.Info("Released RemoteNamespace", "remoteNamespace", klog.KObj(rn))
	return reconcile.Result{}, nil
}

// setStatus records o in rn's status when it changes anything.
func (r *Reconciler) setStatus(ctx context.Context, rn *offloadv1alpha1.RemoteNamespace, o outcome) error {
	before := rn.Status.DeepCopy()
	rn.Status.Phase = o.phase
	status := metav1.ConditionFalse
	if o.phase == offloadv1alpha1.RemoteNamespaceReady {
		status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&rn.Status.Conditions, metav1.Condition{Type: offloadv1alpha1.ConditionReady, Status: status,
		Reason: o.reason, Message: o.message, ObservedGeneration: rn.Generation})
	if equality.Semantic.DeepEqual(before, &rn.Status) {
		return nil
	}
	if err := r.Client.Status().Update(ctx, rn); err != nil {
		return fmt.Errorf("updating the status of RemoteNamespace %s: %w", klog.KObj(rn), err)
	}
	if o.phase == offloadv1alpha1.RemoteNamespaceFailed {
		ctrl.LoggerFrom(ctx).Info("Refused RemoteNamespace", "remoteNamespace", klog.KObj(rn), "reason", o.reason, "message", o.message)
	}
	return nil
}

// requestsOfTenantNamespace maps a ResourceOffer to the RemoteNamespaces of
// its tenant namespace.
func (r *Reconciler) requestsOfTenantNamespace(ctx context.Context, o client.Object) []reconcile.Request {
	return r.requestsIn(ctx, o.GetNamespace())
}

// requestsOfTenant maps a Tenant, whose policy labels its twin namespaces,
// to the RemoteNamespaces of its tenant namespace.
func (r *Reconciler) requestsOfTenant(ctx context.Context, o client.Object) []reconcile.Request {
	t, ok := o.(*offloadv1alpha1.Tenant)
	if !ok || t.Spec.TenantNamespace == "" {
		return nil
	}
	return r.requestsIn(ctx, t.Spec.TenantNamespace)
}

// requestsOfAll maps a default PriorityClass, which every twin namespace
// records (AnnotationPriorityClasses), to every RemoteNamespace.
func (r *Reconciler) requestsOfAll(ctx context.Context, _ client.Object) []reconcile.Request {
	return r.requestsIn(ctx, "")
}

// defaultChanged passes the events of PriorityClasses that are, or were,
// the cluster's default.
var defaultChanged = predicate.Funcs{
	CreateFunc:  func(e event.CreateEvent) bool { return isDefaultClass(e.Object) },
	DeleteFunc:  func(e event.DeleteEvent) bool { return isDefaultClass(e.Object) },
	UpdateFunc:  func(e event.UpdateEvent) bool { return isDefaultClass(e.ObjectOld) || isDefaultClass(e.ObjectNew) },
	GenericFunc: func(event.GenericEvent) bool { return false },
}

func isDefaultClass(o client.Object) bool {
	pc, ok := o.(*schedulingv1.PriorityClass)
	return ok && pc.GlobalDefault
}

// requestsIn lists the RemoteNamespaces of tenant namespace ns (every
// namespace when ns is empty) as requests.
func (r *Reconciler) requestsIn(ctx context.Context, ns string) []reconcile.Request {
	var list offloadv1alpha1.RemoteNamespaceList
	if err := r.Client.List(ctx, &list, client.InNamespace(ns)); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "Listing RemoteNamespaces", "namespace", ns)
		return nil
	}
	reqs := make([]reconcile.Request, 0, len(list.Items))
	for _, rn := range list.Items {
		reqs = append(reqs, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: rn.Namespace, Name: rn.Name}})
	}
	return reqs
}

// isManaged says whether o is a twin namespace, or an object in one, made
// by this controller.
func isManaged(o client.Object) bool {
	return o.GetLabels()[offloadv1alpha1.LabelOriginClusterID] != "" && o.GetAnnotations()[AnnotationRemoteNamespace] != ""
}

// requestFromAnnotation maps an object the controller made to the
// RemoteNamespace its annotation names.
func requestFromAnnotation(_ context.Context, o client.Object) []reconcile.Request {
	ns, name, ok := strings.Cut(o.GetAnnotations()[AnnotationRemoteNamespace], "/")
	if !ok || ns == "" || name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}}
}
