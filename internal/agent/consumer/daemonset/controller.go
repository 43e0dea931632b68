package daemonset

import (
	"context"
	"encoding/json"
	"fmt"

	"gomodules.xyz/jsonpatch/v2"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// ControllerName names the controller in logs and metrics.
const ControllerName = "daemonset"

// Survey tells whether this cluster has virtual nodes, or asked for one
// (a virtual node, or a ForeignCluster that asks for one and is not being
// deleted), and whether one of its virtual nodes is untainted. Counting the
// ForeignClusters keeps DaemonSets off a virtual node before it is even
// created, so none gets a pod there in the meantime.
func Survey(ctx context.Context, c client.Reader) (VirtualNodes, error) {
	nodes := &corev1.NodeList{}
	if err := c.List(ctx, nodes, client.MatchingLabels{offloadv1alpha1.LabelType: offloadv1alpha1.TypeVirtualNode}); err != nil {
		return VirtualNodes{}, fmt.Errorf("listing virtual nodes: %w", err)
	}
	if len(nodes.Items) > 0 {
		vn := VirtualNodes{Expected: true}
		for i := range nodes.Items {
			vn.Untainted = vn.Untainted || offloadv1alpha1.VirtualNodeUntainted(&nodes.Items[i])
		}
		return vn, nil
	}
	fcs := &offloadv1alpha1.ForeignClusterList{}
	if err := c.List(ctx, fcs); err != nil {
		return VirtualNodes{}, fmt.Errorf("listing peers: %w", err)
	}
	for _, fc := range fcs.Items {
		if fc.Spec.OutgoingPeering.Enabled && fc.DeletionTimestamp == nil {
			return VirtualNodes{Expected: true}, nil
		}
	}
	return VirtualNodes{}, nil
}

// Reconciler keeps the DaemonSets of this cluster, as a consumer, off its
// virtual nodes (see the package comment). It reads DaemonSets, Nodes and
// ForeignClusters from the manager's cache, and updates only the
// DaemonSets it must change, as the ValidatingAdmissionPolicy
// offload-controller-manager-daemonsets holds it to: their pod template's
// required node affinity and the AnnotationVirtualNodesExcluded mark.
type Reconciler struct {
	// Client reads from the manager's cache and writes to the API server.
	Client client.Client
}

// Reconcile implements reconcile.Reconciler for one DaemonSet.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ds := &appsv1.DaemonSet{}
	if err := r.Client.Get(ctx, req.NamespacedName, ds); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	// The chart's own DaemonSet keeps itself off virtual nodes; Helm owns it.
	if ds.DeletionTimestamp != nil || ds.Labels[offloadv1alpha1.PartOfLabel] == offloadv1alpha1.PartOfValue {
		return reconcile.Result{}, nil
	}
	vn, err := Survey(ctx, r.Client)
	if err != nil {
		return reconcile.Result{}, err
	}
	before := ds.DeepCopy()
	if !Reconcile(ds, vn) {
		return reconcile.Result{}, nil
	}
	// A JSON patch of what changed, not an Update: an Update of this
	// agent's types would drop the fields they do not know. It is tested
	// against the resourceVersion read, so a concurrent change conflicts.
	ops, err := changes(before, ds)
	if err != nil {
		return reconcile.Result{}, err
	}
	ops = append([]jsonpatch.JsonPatchOperation{{Operation: "test", Path: "/metadata/resourceVersion", Value: before.ResourceVersion}}, ops...)
	body, err := json.Marshal(ops)
	if err != nil {
		return reconcile.Result{}, err
	}
	if err := r.Client.Patch(ctx, ds, client.RawPatch(types.JSONPatchType, body)); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil
		}
		// A conflict is retried with backoff, as any error.
		return reconcile.Result{}, fmt.Errorf("updating DaemonSet %s: %w", req.NamespacedName, err)
	}
	action := "Kept a DaemonSet off the virtual nodes"
	if !vn.Expected || !ShouldExclude(ds, vn.Untainted) {
		action = "Let a DaemonSet back onto every node"
	}
	ctrl.LoggerFrom(ctx).Info(action, "daemonSet", klog.KObj(ds))
	return reconcile.Result{}, nil
}

// SetupWithManager registers the controller with mgr: every DaemonSet, and
// all of them again when a virtual node or a ForeignCluster comes or goes,
// or a virtual node loses or regains its taint.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	all := handler.EnqueueRequestsFromMapFunc(func(ctx context.Context, _ client.Object) []reconcile.Request {
		list := &appsv1.DaemonSetList{}
		if err := r.Client.List(ctx, list); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Listing DaemonSets")
			return nil
		}
		reqs := make([]reconcile.Request, 0, len(list.Items))
		for _, ds := range list.Items {
			reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&ds)})
		}
		return reqs
	})
	// Only whether there are virtual nodes or peers asking for one counts,
	// not their status.
	comesOrGoes := predicate.Funcs{
		UpdateFunc: func(e event.UpdateEvent) bool {
			return (e.ObjectOld.GetDeletionTimestamp() == nil) != (e.ObjectNew.GetDeletionTimestamp() == nil) ||
				e.ObjectOld.GetGeneration() != e.ObjectNew.GetGeneration()
		},
	}
	virtual := predicate.NewPredicateFuncs(func(o client.Object) bool {
		return o.GetLabels()[offloadv1alpha1.LabelType] == offloadv1alpha1.TypeVirtualNode
	})
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&appsv1.DaemonSet{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Watches(&corev1.Node{}, all, builder.WithPredicates(virtual, nodeComesOrGoes())).
		Watches(&offloadv1alpha1.ForeignCluster{}, all, builder.WithPredicates(comesOrGoes)).
		Complete(r)
}

// nodeComesOrGoes passes the creation and deletion of nodes and the
// removal or return of the virtual-node taint, not their status updates,
// which virtual nodes send every few seconds.
func nodeComesOrGoes() predicate.Funcs {
	return predicate.Funcs{UpdateFunc: func(e event.UpdateEvent) bool {
		old, okOld := e.ObjectOld.(*corev1.Node)
		updated, okNew := e.ObjectNew.(*corev1.Node)
		return okOld && okNew && offloadv1alpha1.VirtualNodeUntainted(old) != offloadv1alpha1.VirtualNodeUntainted(updated)
	}}
}
