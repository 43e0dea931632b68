// Package webhook is the scheduling webhook of the offload-agent
// controller-manager: a mutating admission webhook that gives the pods of
// offloaded namespaces the virtual-node toleration and the node affinity
// their namespace's podOffloadingStrategy implies, and a CertManager that
// keeps the webhook's self-signed certificates, so no cert-manager is needed.
package webhook

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/klog/v2"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/daemonset"
)

var (
	// virtualNodeTaint is the taint every virtual node carries.
	virtualNodeTaint = offloadv1alpha1.VirtualNodeTaint()
	// onVirtualNode and offVirtualNode select virtual nodes and the others.
	onVirtualNode = corev1.NodeSelectorRequirement{
		Key: offloadv1alpha1.LabelType, Operator: corev1.NodeSelectorOpIn, Values: []string{offloadv1alpha1.TypeVirtualNode},
	}
	offVirtualNode = corev1.NodeSelectorRequirement{
		Key: offloadv1alpha1.LabelType, Operator: corev1.NodeSelectorOpNotIn, Values: []string{offloadv1alpha1.TypeVirtualNode},
	}
)

// Mutate gives pod the tolerations and the required node affinity that the
// NamespaceOffloading no of its namespace implies, and reports whether it
// changed anything. It leaves alone pods that no does not cover (no is nil
// or being deleted), pods of DaemonSets and pods already bound to a node.
//
//   - Local: the pod must avoid virtual nodes; it gets no toleration.
//   - Remote: the pod must run on a virtual node that the ClusterSelector
//     selects (any virtual node when there is none).
//   - LocalAndRemote (or empty): the pod may run anywhere; with a
//     ClusterSelector, only on local nodes or selected virtual nodes.
//
// Remote and LocalAndRemote pods tolerate the virtual-node taint, and the
// unreachable and not-ready taints (NoExecute) for opts.TolerationSeconds,
// which replace those the DefaultTolerationSeconds admission plugin adds.
//
// Required node affinity terms are ORed by Kubernetes, so the pod's own
// terms are combined with the strategy's as a cross product: each pod term
// ANDed with each strategy term. Preferred terms and every other field are
// kept. Mutate is idempotent: a second call changes nothing.
func Mutate(pod *corev1.Pod, no *offloadv1alpha1.NamespaceOffloading, opts Options) (changed bool) {
	if pod == nil || no == nil || no.DeletionTimestamp != nil || pod.Spec.NodeName != "" || ownedByDaemonSet(pod) {
		return false
	}
	before := pod.Spec.DeepCopy()
	switch no.Spec.PodOffloadingStrategy {
	case offloadv1alpha1.Local:
		requireNodes(pod, []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{offVirtualNode}}})
	case offloadv1alpha1.Remote:
		tolerateOffloading(pod, opts.TolerationSeconds)
		terms := virtualTerms(no.Spec.ClusterSelector)
		if len(terms) == 0 {
			// "On a virtual node and not on one": the selector selects no peer.
			terms = []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{onVirtualNode, offVirtualNode}}}
		}
		requireNodes(pod, terms)
	case offloadv1alpha1.LocalAndRemote, "":
		tolerateOffloading(pod, opts.TolerationSeconds)
		if selects(no.Spec.ClusterSelector) {
			local := corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{offVirtualNode}}
			requireNodes(pod, append([]corev1.NodeSelectorTerm{local}, virtualTerms(no.Spec.ClusterSelector)...))
		}
	default:
		// The CRD's enum rules out other strategies; an unknown one is not
		// a reason to send pods anywhere.
		return false
	}
	return !apiequality.Semantic.DeepEqual(before, &pod.Spec)
}

// KeepOffVirtualNodes adds to pod's required node affinity that it runs on
// no virtual node, for a pod that mounts storage of this cluster, and
// reports whether it changed anything. With a Remote strategy the pod then
// fits no node, and stays Pending with the scheduler's reason, rather than
// failing on a provider that cannot reach its volume.
func KeepOffVirtualNodes(pod *corev1.Pod) bool {
	if pod.Spec.NodeName != "" {
		return false
	}
	before := pod.Spec.DeepCopy()
	requireNodes(pod, []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{offVirtualNode}}})
	return !apiequality.Semantic.DeepEqual(before, &pod.Spec)
}

// selects tells whether sel restricts the peers: a nil selector, or one
// without terms, selects them all.
func selects(sel *corev1.NodeSelector) bool { return sel != nil && len(sel.NodeSelectorTerms) > 0 }

// virtualTerms are the terms that select the virtual nodes of the peers
// sel selects: each term of sel ANDed with "is a virtual node". An empty
// term of sel matches no node, as in Kubernetes, so it is dropped: a
// selector with only empty terms yields no term at all.
func virtualTerms(sel *corev1.NodeSelector) []corev1.NodeSelectorTerm {
	virtual := corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{onVirtualNode}}
	if !selects(sel) {
		return []corev1.NodeSelectorTerm{virtual}
	}
	var terms []corev1.NodeSelectorTerm
	for _, t := range sel.NodeSelectorTerms {
		if isEmpty(t) {
			continue
		}
		terms = append(terms, and(t, virtual))
	}
	return terms
}

// requireNodes restricts the pod's required node affinity to the nodes
// that both its own terms and ours select. Kubernetes ORs terms, so the
// result is every pod term ANDed with every one of ours, except that a pod
// term which already implies one of ours (it has all that term's
// requirements), or matches no node (it is empty), is kept as it is. That
// exception makes requireNodes idempotent.
func requireNodes(pod *corev1.Pod, ours []corev1.NodeSelectorTerm) {
	if pod.Spec.Affinity == nil {
		pod.Spec.Affinity = &corev1.Affinity{}
	}
	if pod.Spec.Affinity.NodeAffinity == nil {
		pod.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{}
	}
	na := pod.Spec.Affinity.NodeAffinity
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil || len(na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms) == 0 {
		na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: ours}
		return
	}
	var merged []corev1.NodeSelectorTerm
	for _, t := range na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		if isEmpty(t) || slices.ContainsFunc(ours, func(o corev1.NodeSelectorTerm) bool { return implies(t, o) }) {
			merged = appendTerm(merged, t)
			continue
		}
		for _, o := range ours {
			merged = appendTerm(merged, and(t, o))
		}
	}
	na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = merged
}

// and returns a term with the requirements of both a and b.
func and(a, b corev1.NodeSelectorTerm) corev1.NodeSelectorTerm {
	out := *a.DeepCopy()
	for _, r := range b.MatchExpressions {
		if !containsRequirement(out.MatchExpressions, r) {
			out.MatchExpressions = append(out.MatchExpressions, *r.DeepCopy())
		}
	}
	for _, r := range b.MatchFields {
		if !containsRequirement(out.MatchFields, r) {
			out.MatchFields = append(out.MatchFields, *r.DeepCopy())
		}
	}
	return out
}

// implies tells whether term t has every requirement of term o, so that a
// node t matches is always one o matches.
func implies(t, o corev1.NodeSelectorTerm) bool {
	for _, r := range o.MatchExpressions {
		if !containsRequirement(t.MatchExpressions, r) {
			return false
		}
	}
	for _, r := range o.MatchFields {
		if !containsRequirement(t.MatchFields, r) {
			return false
		}
	}
	return true
}

func isEmpty(t corev1.NodeSelectorTerm) bool {
	return len(t.MatchExpressions) == 0 && len(t.MatchFields) == 0
}

func containsRequirement(rs []corev1.NodeSelectorRequirement, r corev1.NodeSelectorRequirement) bool {
	return slices.ContainsFunc(rs, func(x corev1.NodeSelectorRequirement) bool { return apiequality.Semantic.DeepEqual(x, r) })
}

// appendTerm appends t to terms unless an equal term is already there.
func appendTerm(terms []corev1.NodeSelectorTerm, t corev1.NodeSelectorTerm) []corev1.NodeSelectorTerm {
	if slices.ContainsFunc(terms, func(x corev1.NodeSelectorTerm) bool { return apiequality.Semantic.DeepEqual(x, t) }) {
		return terms
	}
	return append(terms, t)
}

// tolerateOffloading adds the virtual-node toleration unless the pod
// already tolerates that taint, and sets the unreachable and not-ready
// NoExecute tolerations to seconds (nil: forever), replacing any the pod
// has, such as the 300 s ones of the DefaultTolerationSeconds plugin.
func tolerateOffloading(pod *corev1.Pod, seconds *int64) {
	tolerated := slices.ContainsFunc(pod.Spec.Tolerations, func(t corev1.Toleration) bool {
		return t.ToleratesTaint(klog.Background(), &virtualNodeTaint, false)
	})
	if !tolerated {
		pod.Spec.Tolerations = append(pod.Spec.Tolerations, corev1.Toleration{
			Key: offloadv1alpha1.TaintVirtualNode, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute,
		})
	}
	// The node-lifecycle taints, tolerated for Options.TolerationSeconds: a
	// virtual node goes NotReady or unreachable when its provider cannot be
	// reached, and the pods it runs must survive that
	// (docs/architecture.md, Failure policy).
	for _, key := range []string{corev1.TaintNodeUnreachable, corev1.TaintNodeNotReady} {
		setToleration(pod, corev1.Toleration{
			Key: key, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: copySeconds(seconds),
		})
	}
}

// setToleration puts want in place of the pod's first toleration with the
// same key and effect, drops the others, and appends want when there is none.
func setToleration(pod *corev1.Pod, want corev1.Toleration) {
	replaced := false
	out := pod.Spec.Tolerations[:0]
	for _, t := range pod.Spec.Tolerations {
		if t.Key != want.Key || t.Effect != want.Effect {
			out = append(out, t)
			continue
		}
		if !replaced {
			out = append(out, want)
			replaced = true
		}
	}
	if !replaced {
		out = append(out, want)
	}
	pod.Spec.Tolerations = out
}

func copySeconds(s *int64) *int64 {
	if s == nil {
		return nil
	}
	v := *s
	return &v
}

// KeepTolerations puts back into pod the tolerations that old, the pod
// before an update, had for offloading (the virtual-node taint, and the
// unreachable and not-ready NoExecute taints) and the update left out, and
// reports whether it changed pod. A pod's tolerations can only grow, so an
// update written from the user's manifest, which never had the ones this
// webhook added, would otherwise be refused ("existing toleration can not
// be modified"). Other tolerations the update drops are left to the API
// server to refuse.
func KeepTolerations(old, pod *corev1.Pod) (changed bool) {
	for _, t := range old.Spec.Tolerations {
		ours := t.Key == offloadv1alpha1.TaintVirtualNode || slices.Contains([]string{corev1.TaintNodeUnreachable, corev1.TaintNodeNotReady}, t.Key)
		if !ours || t.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		if !slices.ContainsFunc(pod.Spec.Tolerations, func(have corev1.Toleration) bool { return apiequality.Semantic.DeepEqual(have, t) }) {
			pod.Spec.Tolerations = append(pod.Spec.Tolerations, *t.DeepCopy())
			changed = true
		}
	}
	return changed
}

// ownedByDaemonSet tells whether an apps DaemonSet owns pod. DaemonSet pods
// must stay on the node the DaemonSet controller picked, and a virtual node
// must never get one by accident.
func ownedByDaemonSet(pod *corev1.Pod) bool {
	_, ok := daemonset.OwnerOf(pod)
	return ok
}
