// Package daemonset keeps DaemonSets off the virtual nodes of a consumer.
//
// The DaemonSet controller puts a pod on every node whose taints the pod
// template tolerates and whose labels its node affinity matches. Pods that
// tolerate every taint (CNI agents, log shippers, kube-proxy) therefore
// tolerate the virtual-node taint too, and would get a pod on each virtual
// node: run in the provider when their namespace is offloaded, Pending for
// ever otherwise, and `kubectl rollout status` would never complete. A
// virtual node without its taint (virtualNodes.taint=false, or untainted
// by hand) would get a pod of every DaemonSet. Only the DaemonSet's own
// template can make the DaemonSet controller leave a node out, so while
// this cluster has virtual nodes (or peers it asked for), the controller
// gives such DaemonSets (all of them while a virtual node is untainted)
// the required node affinity requirement offload.io/type NotIn
// [virtual-node], unless they opt in with the annotation
// offload.io/virtual-nodes=allowed, and takes it out again once the last
// virtual node is gone. Changing a template rolls the DaemonSet's pods
// once, as the same change made by hand would.
//
// There is no mutating webhook: one would let the agent's identity rewrite
// every DaemonSet of the cluster as it is created. In the moment between a
// DaemonSet's creation and the controller's change, the DaemonSet
// controller may put a pod on a virtual node; the virtual kubelet holds
// such a pod back (HeldBack), never sending it to the provider, and the
// DaemonSet controller deletes it once the DaemonSet is changed.
package daemonset

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/klog/v2"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

var (
	// offVirtualNodes is the requirement the agent adds to every required
	// node affinity term of an excluded DaemonSet's template.
	offVirtualNodes = corev1.NodeSelectorRequirement{
		Key: offloadv1alpha1.LabelType, Operator: corev1.NodeSelectorOpNotIn, Values: []string{offloadv1alpha1.TypeVirtualNode},
	}
	// virtualNodeTaint is the taint virtual nodes carry.
	virtualNodeTaint = offloadv1alpha1.VirtualNodeTaint()
)

// VirtualNodes is what decides which DaemonSets this cluster keeps off its
// virtual nodes.
type VirtualNodes struct {
	// Expected: the cluster has virtual nodes, or asked for one.
	Expected bool
	// Untainted: one of them lacks the virtual-node taint, so that every
	// DaemonSet would get a pod there.
	Untainted bool
}

// ShouldExclude tells whether ds must be kept off virtual nodes while the
// cluster has some: it did not opt in, and its pods tolerate the
// virtual-node taint or untainted is true (a virtual node lacks it).
func ShouldExclude(ds *appsv1.DaemonSet, untainted bool) bool {
	if ds.Annotations[offloadv1alpha1.AnnotationVirtualNodes] == offloadv1alpha1.VirtualNodesAllowed {
		return false
	}
	if untainted {
		return true
	}
	for i := range ds.Spec.Template.Spec.Tolerations {
		if ds.Spec.Template.Spec.Tolerations[i].ToleratesTaint(klog.Background(), &virtualNodeTaint, false) {
			return true
		}
	}
	return false
}

// OwnerOf returns the name of the apps DaemonSet that owns pod, if one does.
func OwnerOf(pod *corev1.Pod) (string, bool) {
	for _, ref := range pod.OwnerReferences {
		gv, err := schema.ParseGroupVersion(ref.APIVersion)
		if err == nil && gv.Group == appsv1.GroupName && ref.Kind == "DaemonSet" {
			return ref.Name, true
		}
	}
	return "", false
}

// HeldBack tells why ds's pod, bound to node, a virtual node, must not
// leave for a provider: ds is one the controller keeps off virtual nodes.
// It is nil for a DaemonSet that may run there: it opted in (or, on a
// tainted node, its pods tolerate no virtual-node taint, so the DaemonSet
// controller never put one there).
func HeldBack(ds *appsv1.DaemonSet, node *corev1.Node) error {
	untainted := offloadv1alpha1.VirtualNodeUntainted(node)
	if !ShouldExclude(ds, untainted) {
		return nil
	}
	why := "tolerates every taint"
	if untainted {
		why = fmt.Sprintf("does not opt in, and virtual node %s is untainted", node.Name)
	}
	return fmt.Errorf("DaemonSet %s/%s %s, so the agent keeps it off virtual nodes (annotate it %s=%s to run it there too): this pod is not sent to the provider",
		ds.Namespace, ds.Name, why, offloadv1alpha1.AnnotationVirtualNodes, offloadv1alpha1.VirtualNodesAllowed)
}

// Reconcile makes ds what it should be: kept off virtual nodes when vn
// expects some and ShouldExclude says so; otherwise without the
// requirement the agent added (and only when it marked ds as having added
// it). It reports whether it changed ds. It is idempotent.
func Reconcile(ds *appsv1.DaemonSet, vn VirtualNodes) (changed bool) {
	marked := ds.Annotations[offloadv1alpha1.AnnotationVirtualNodesExcluded] == "true"
	switch {
	case vn.Expected && ShouldExclude(ds, vn.Untainted):
		if !addRequirement(&ds.Spec.Template.Spec) {
			return false
		}
		if ds.Annotations == nil {
			ds.Annotations = map[string]string{}
		}
		ds.Annotations[offloadv1alpha1.AnnotationVirtualNodesExcluded] = "true"
		return true
	case marked:
		removeRequirement(&ds.Spec.Template.Spec)
		delete(ds.Annotations, offloadv1alpha1.AnnotationVirtualNodesExcluded)
		return true
	}
	return false
}

// addRequirement ANDs offVirtualNodes into every required node affinity
// term of spec (required terms are ORed, so each needs it), or adds a term
// with it alone when there is none. It reports whether it changed spec:
// not when every term has it already.
func addRequirement(spec *corev1.PodSpec) bool {
	if spec.Affinity == nil {
		spec.Affinity = &corev1.Affinity{}
	}
	if spec.Affinity.NodeAffinity == nil {
		spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{}
	}
	required := na.RequiredDuringSchedulingIgnoredDuringExecution
	if len(required.NodeSelectorTerms) == 0 {
		required.NodeSelectorTerms = []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{offVirtualNodes}}}
		return true
	}
	changed := false
	for i := range required.NodeSelectorTerms {
		t := &required.NodeSelectorTerms[i]
		if indexOf(t.MatchExpressions) < 0 {
			t.MatchExpressions = append(t.MatchExpressions, *offVirtualNodes.DeepCopy())
			changed = true
		}
	}
	return changed
}

// removeRequirement takes offVirtualNodes out of every required term of
// spec, drops the terms it leaves empty, and the affinity structs it
// leaves empty, so that a template the agent changed is again what it was.
func removeRequirement(spec *corev1.PodSpec) {
	if spec.Affinity == nil || spec.Affinity.NodeAffinity == nil || spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return
	}
	na := spec.Affinity.NodeAffinity
	required := na.RequiredDuringSchedulingIgnoredDuringExecution
	terms := required.NodeSelectorTerms[:0]
	for _, t := range required.NodeSelectorTerms {
		if i := indexOf(t.MatchExpressions); i >= 0 {
			t.MatchExpressions = append(t.MatchExpressions[:i], t.MatchExpressions[i+1:]...)
			if len(t.MatchExpressions) == 0 {
				t.MatchExpressions = nil
				if len(t.MatchFields) == 0 {
					continue
				}
			}
		}
		terms = append(terms, t)
	}
	required.NodeSelectorTerms = terms
	if len(terms) == 0 {
		na.RequiredDuringSchedulingIgnoredDuringExecution = nil
	}
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil && len(na.PreferredDuringSchedulingIgnoredDuringExecution) == 0 {
		spec.Affinity.NodeAffinity = nil
	}
	if *spec.Affinity == (corev1.Affinity{}) {
		spec.Affinity = nil
	}
}

// indexOf returns where offVirtualNodes is in reqs, or -1.
func indexOf(reqs []corev1.NodeSelectorRequirement) int {
	for i, r := range reqs {
		if r.Key == offVirtualNodes.Key && r.Operator == offVirtualNodes.Operator &&
			len(r.Values) == 1 && r.Values[0] == offVirtualNodes.Values[0] {
			return i
		}
	}
	return -1
}
