package remotenamespace

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// GarbageCollectorName names the garbage collector in logs and metrics.
const GarbageCollectorName = "twinnamespace-gc"

// gcRequest is the one request the garbage collector works on: every event
// asks for a full pass.
var gcRequest = reconcile.Request{NamespacedName: types.NamespacedName{Name: "twin-namespaces"}}

// GarbageCollector deletes the twin namespaces, and so the remote pods, of
// consumers that have no Tenant any more. Unpeering deletes the tenant
// namespace, whose RemoteNamespaces then delete their twins one by one;
// this catches what that misses: a Tenant deleted while the controller was
// down, or a RemoteNamespace whose finalizer was removed by hand.
//
// A twin namespace is one labelled with both LabelOriginClusterID and
// LabelOriginNamespace. It runs after the cache has listed every Tenant
// and Namespace, and checks uncached, before deleting anything, that the
// consumer really has no Tenant.
type GarbageCollector struct {
	// Client reads from the manager's cache and deletes namespaces.
	Client client.Client
	// Reader reads Tenants uncached to confirm a consumer is gone; nil
	// means Client.
	Reader client.Reader

	skipNameValidation bool
}

// SetupWithManager registers the garbage collector with mgr: it makes a
// pass whenever a Tenant or a twin namespace changes, and once at start.
func (g *GarbageCollector) SetupWithManager(mgr ctrl.Manager) error {
	if g.Reader == nil {
		g.Reader = mgr.GetAPIReader()
	}
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{gcRequest}
	})
	twin := builder.WithPredicates(predicate.NewPredicateFuncs(isTwinNamespace))
	err := ctrl.NewControllerManagedBy(mgr).
		Named(GarbageCollectorName).
		WithOptions(controller.Options{SkipNameValidation: &g.skipNameValidation, MaxConcurrentReconciles: 1}).
		Watches(&offloadv1alpha1.Tenant{}, all).
		Watches(&corev1.Namespace{}, all, twin).
		Complete(g)
	if err != nil {
		return fmt.Errorf("setting up the %s controller: %w", GarbageCollectorName, err)
	}
	return nil
}

func isTwinNamespace(o client.Object) bool {
	l := o.GetLabels()
	return l[offloadv1alpha1.LabelOriginClusterID] != "" && l[offloadv1alpha1.LabelOriginNamespace] != ""
}

// Reconcile deletes the twin namespaces whose consumer has no Tenant.
func (g *GarbageCollector) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	sel := labels.NewSelector()
	for _, key := range []string{offloadv1alpha1.LabelOriginClusterID, offloadv1alpha1.LabelOriginNamespace} {
		req, err := labels.NewRequirement(key, selection.Exists, nil)
		if err != nil {
			return reconcile.Result{}, err
		}
		sel = sel.Add(*req)
	}
	var twins corev1.NamespaceList
	if err := g.Client.List(ctx, &twins, client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return reconcile.Result{}, fmt.Errorf("listing twin namespaces: %w", err)
	}
	consumers, err := tenantIDs(ctx, g.Client)
	if err != nil {
		return reconcile.Result{}, err
	}
	var orphans []*corev1.Namespace
	for i := range twins.Items {
		ns := &twins.Items[i]
		if ns.DeletionTimestamp.IsZero() && !consumers[ns.Labels[offloadv1alpha1.LabelOriginClusterID]] {
			orphans = append(orphans, ns)
		}
	}
	if len(orphans) == 0 {
		return reconcile.Result{}, nil
	}
	reader := g.Reader
	if reader == nil {
		reader = g.Client
	}
	if consumers, err = tenantIDs(ctx, reader); err != nil {
		return reconcile.Result{}, err
	}
	log := ctrl.LoggerFrom(ctx)
	for _, ns := range orphans {
		id := ns.Labels[offloadv1alpha1.LabelOriginClusterID]
		if consumers[id] {
			continue
		}
		if err := deleteNamespace(ctx, g.Client, ns); err != nil {
			return reconcile.Result{}, err
		}
		log.Info("Deleting the twin namespace of a consumer that has no tenant any more", "namespace", ns.Name, "consumerID", id)
	}
	return reconcile.Result{}, nil
}

// tenantIDs returns the cluster IDs of the consumers that have a Tenant.
// A Tenant being deleted still counts: its RemoteNamespaces clean up.
func tenantIDs(ctx context.Context, r client.Reader) (map[string]bool, error) {
	var tenants offloadv1alpha1.TenantList
	if err := r.List(ctx, &tenants); err != nil {
		return nil, fmt.Errorf("listing tenants: %w", err)
	}
	ids := make(map[string]bool, len(tenants.Items))
	for _, t := range tenants.Items {
		ids[t.Spec.ClusterID] = true
	}
	return ids, nil
}
