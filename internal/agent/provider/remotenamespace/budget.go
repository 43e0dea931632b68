package remotenamespace

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// budgeted reports whether name is a quota resource an offer is a budget
// of, for the whole tenant: every twin namespace of a consumer shares one
// offer and one StoragePolicy. These are the requests of cpu, memory,
// ephemeral storage, devices (GPUs) and persistent storage, and the number
// of pods and of claims.
func budgeted(name corev1.ResourceName) bool {
	switch name {
	case corev1.ResourceRequestsCPU, corev1.ResourceRequestsMemory, corev1.ResourcePods, corev1.ResourceRequestsEphemeralStorage,
		corev1.ResourceRequestsStorage, corev1.ResourcePersistentVolumeClaims:
		return true
	}
	r, ok := strings.CutPrefix(string(name), corev1.DefaultResourceRequestsPrefix)
	return ok && offloadv1alpha1.Device(corev1.ResourceName(r))
}

// BudgetFor returns the hard limits of one twin namespace's quota so that
// the tenant's twin namespaces together stay within the offer and the
// storage lent: those,
// less what the tenant's other twin namespaces use. Each namespace may use
// all that is left, so one busy namespace is not held back by idle ones;
// the quotas follow every change of use.
func BudgetFor(offered corev1.ResourceList, storage *offloadv1alpha1.StoragePolicy, usedElsewhere corev1.ResourceList) corev1.ResourceList {
	hard := QuotaFor(offered, storage)
	for name, q := range hard {
		if !budgeted(name) {
			continue
		}
		if used, ok := usedElsewhere[name]; ok {
			q.Sub(used)
			if q.Sign() < 0 {
				q = resource.MustParse("0")
			}
			hard[name] = q
		}
	}
	return hard
}

// usedElsewhere sums what the tenant's twin namespaces other than rn's use
// of the budgeted resources, as their quotas' status says.
func (r *Reconciler) usedElsewhere(ctx context.Context, rn *offloadv1alpha1.RemoteNamespace) (corev1.ResourceList, error) {
	var list offloadv1alpha1.RemoteNamespaceList
	if err := r.Client.List(ctx, &list, client.InNamespace(rn.Namespace)); err != nil {
		return nil, fmt.Errorf("listing the RemoteNamespaces of namespace %s: %w", rn.Namespace, err)
	}
	sum := corev1.ResourceList{}
	for _, other := range list.Items {
		target := other.Spec.TargetNamespace
		if other.Name == rn.Name || target == "" || target == rn.Spec.TargetNamespace {
			continue
		}
		var q corev1.ResourceQuota
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: target, Name: QuotaName}, &q)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("reading the quota of namespace %s: %w", target, err)
		}
		// Only a quota this controller made for the same tenant counts.
		if !strings.HasPrefix(q.Annotations[AnnotationRemoteNamespace], rn.Namespace+"/") {
			continue
		}
		for name, used := range q.Status.Used {
			if budgeted(name) {
				total := sum[name]
				total.Add(used)
				sum[name] = total
			}
		}
	}
	return sum, nil
}

// requestsOfTenantOf maps a quota the controller made to every
// RemoteNamespace of its tenant: a change of use in one twin namespace
// changes the budget of the others.
func (r *Reconciler) requestsOfTenantOf(ctx context.Context, o client.Object) []reconcile.Request {
	ns, _, ok := strings.Cut(o.GetAnnotations()[AnnotationRemoteNamespace], "/")
	if !ok || ns == "" {
		return nil
	}
	return r.requestsIn(ctx, ns)
}

// quotaEvents queues the RemoteNamespaces a change of a quota the
// controller made concerns (requestsOfQuotaUpdate).
func (r *Reconciler) quotaEvents() handler.Funcs {
	all := func(ctx context.Context, o client.Object, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		for _, req := range r.requestsOfTenantOf(ctx, o) {
			q.Add(req)
		}
	}
	return handler.Funcs{
		CreateFunc: func(ctx context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			all(ctx, e.Object, q)
		},
		UpdateFunc: func(ctx context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			for _, req := range r.requestsOfQuotaUpdate(ctx, e.ObjectOld, e.ObjectNew) {
				q.Add(req)
			}
		},
		DeleteFunc: func(ctx context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			all(ctx, e.Object, q)
		},
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			all(ctx, e.Object, q)
		},
	}
}

// requestsOfQuotaUpdate maps an update of a quota the controller made to
// the RemoteNamespaces it concerns. A change of its use only (its status,
// which the quota controller rewrites as the tenant's pods come and go)
// changes the budget of the tenant's other twin namespaces, not the
// quota's own: its own RemoteNamespace is left out, so that a burst of pods
// in one twin namespace does not reconcile it once per quota update. Any
// other change (its limits, labels or annotations, its deletion) may be
// drift to repair, and concerns every RemoteNamespace of the tenant.
func (r *Reconciler) requestsOfQuotaUpdate(ctx context.Context, oldObj, newObj client.Object) []reconcile.Request {
	reqs := r.requestsOfTenantOf(ctx, newObj)
	o, ok1 := oldObj.(*corev1.ResourceQuota)
	n, ok2 := newObj.(*corev1.ResourceQuota)
	if !ok1 || !ok2 || !useOnly(o, n) {
		return reqs
	}
	own := requestFromAnnotation(ctx, n)
	return slices.DeleteFunc(reqs, func(req reconcile.Request) bool { return len(own) == 1 && req == own[0] })
}

// useOnly reports whether quota b differs from a in its status only.
func useOnly(a, b *corev1.ResourceQuota) bool {
	return equality.Semantic.DeepEqual(a.Spec, b.Spec) && maps.Equal(a.Labels, b.Labels) && maps.Equal(a.Annotations, b.Annotations) &&
		a.DeletionTimestamp.Equal(b.DeletionTimestamp) && slices.Equal(a.Finalizers, b.Finalizers) &&
		equality.Semantic.DeepEqual(a.OwnerReferences, b.OwnerReferences)
}
