package reflection

import (
	"fmt"
	"maps"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// Node-placement rules.
//
// Keys "about the virtual node" are the offload.io/ ones, the
// virtual-kubelet convention "type", and kubernetes.io/hostname (and the
// metadata.name field): on the consumer they can only have been satisfied
// by the virtual node, and on the provider they name nothing that exists.
//
// A required node affinity is an OR of terms, each an AND of expressions.
// Dropping expressions naively would widen placement: with the terms
// {type NotIn virtual-node} OR {type In virtual-node, zone In a}, the first
// becomes empty and, read as "anywhere", would cancel the zone the user asked
// for on remote nodes. So RemotePod first drops the terms the virtual node
// does not satisfy (they are about local nodes), then strips the
// virtual-node expressions from the rest. A term left empty was satisfied by
// the virtual node alone, so the pod may go anywhere on the provider and the
// required affinity is dropped. When no term matches the virtual node the pod
// should not be there at all, and RemotePod refuses it, as a kubelet's
// admission would. Preferred terms follow the same rules; emptied ones are
// dropped.

// isVirtualNodeKey reports whether a node label key is about virtual nodes.
func isVirtualNodeKey(key string) bool {
	return isOffloadKey(key) || key == corev1.LabelHostname || key == virtualKubeletTypeLabel
}

// unreachableTaints are the taints whose tolerations the webhook adds for
// virtual-node partitions.
var unreachableTaints = []string{corev1.TaintNodeUnreachable, corev1.TaintNodeNotReady}

// remoteTolerations drops the tolerations that only make sense for the
// virtual node, and, unless the provider lets the consumer place its pods,
// every other one: tolerations only widen where a pod may go, and on the
// provider that is the provider's to say (its admission refuses them).
func remoteTolerations(in []corev1.Toleration, o Origin) []corev1.Toleration {
	if !o.NodePlacement {
		return nil
	}
	var out []corev1.Toleration
	for _, t := range in {
		if isOffloadKey(t.Key) || t.Key == virtualKubeletTolerationKey || slices.Contains(unreachableTaints, t.Key) {
			continue
		}
		out = append(out, t)
	}
	return out
}

// remoteNodeSelector keeps the selector keys o may send (keepsNodeKey).
func remoteNodeSelector(in map[string]string, o Origin) map[string]string {
	var out map[string]string
	for k, v := range in {
		if !o.keepsNodeKey(k) {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[k] = v
	}
	return out
}

// remoteTopologySpread drops spread constraints over offload.io/ topology
// keys, which provider nodes do not carry, and, unless the provider lets
// the consumer place its pods, turns the others into preferences
// (ScheduleAnyway): they were written for the consumer's hosts, where the
// virtual node is one host, and the provider may lend a single node, on
// which a hard spread would leave the second pod Pending for good.
func remoteTopologySpread(in []corev1.TopologySpreadConstraint, o Origin) []corev1.TopologySpreadConstraint {
	var out []corev1.TopologySpreadConstraint
	for _, c := range in {
		if isOffloadKey(c.TopologyKey) {
			continue
		}
		if !o.NodePlacement && c.WhenUnsatisfiable != corev1.ScheduleAnyway {
			c.WhenUnsatisfiable = corev1.ScheduleAnyway
			c.MinDomains = nil // only allowed with DoNotSchedule
		}
		out = append(out, c)
	}
	return out
}

// preferredWeight is the weight of the preferences that required pod
// (anti-)affinity terms become (the most a preference can weigh).
const preferredWeight = 100

// relaxPodTerms turns required pod (anti-)affinity terms into preferences
// of the greatest weight, as remoteTopologySpread does with spreading.
func relaxPodTerms(required []corev1.PodAffinityTerm, preferred []corev1.WeightedPodAffinityTerm) []corev1.WeightedPodAffinityTerm {
	for _, t := range required {
		preferred = append(preferred, corev1.WeightedPodAffinityTerm{Weight: preferredWeight, PodAffinityTerm: t})
	}
	return preferred
}

// addProviderPlacement makes spec select the provider's nodes and tolerate
// their taints, as the provider chose for this consumer (Origin's
// NodeSelector and Tolerations); the provider's choice wins over a
// selector of the consumer's on the same key.
func addProviderPlacement(spec *corev1.PodSpec, o Origin) {
	if len(o.NodeSelector) > 0 {
		if spec.NodeSelector == nil {
			spec.NodeSelector = make(map[string]string, len(o.NodeSelector))
		}
		maps.Copy(spec.NodeSelector, o.NodeSelector)
	}
	for _, t := range o.Tolerations {
		if !slices.ContainsFunc(spec.Tolerations, func(have corev1.Toleration) bool { return have.MatchToleration(&t) }) {
			spec.Tolerations = append(spec.Tolerations, t)
		}
	}
}

// virtualNode is what RemotePod knows of the node the pod is bound to.
type virtualNode struct {
	name   string
	labels map[string]string
	// exact is false when labels are assumed: expressions on unknown
	// offload.io/ keys are then taken as satisfied.
	exact bool
}

func newVirtualNode(local *corev1.Pod, o Origin) virtualNode {
	if o.VirtualNodeLabels != nil {
		return virtualNode{name: local.Spec.NodeName, labels: o.VirtualNodeLabels, exact: true}
	}
	labels := map[string]string{
		offloadv1alpha1.LabelType: offloadv1alpha1.TypeVirtualNode,
		virtualKubeletTypeLabel:   "virtual-kubelet",
	}
	if local.Spec.NodeName != "" {
		labels[corev1.LabelHostname] = local.Spec.NodeName
	}
	return virtualNode{name: local.Spec.NodeName, labels: labels}
}

// matches reports whether the virtual node satisfies the virtual-node
// expressions and fields of term; the other expressions are not judged.
// The matching is the scheduler's own (component-helpers nodeaffinity).
func (n virtualNode) matches(term corev1.NodeSelectorTerm) bool {
	var judged corev1.NodeSelectorTerm
	for _, e := range term.MatchExpressions {
		if !isVirtualNodeKey(e.Key) {
			continue
		}
		if _, present := n.labels[e.Key]; !present && !n.exact && e.Key != offloadv1alpha1.LabelType && e.Key != virtualKubeletTypeLabel {
			continue // unknown without the node's labels: assume satisfied
		}
		judged.MatchExpressions = append(judged.MatchExpressions, e)
	}
	if n.name != "" {
		judged.MatchFields = term.MatchFields
	}
	if len(judged.MatchExpressions) == 0 && len(judged.MatchFields) == 0 {
		return true
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name, Labels: n.labels}}
	ok, err := nodeaffinity.NewLazyErrorNodeSelector(&corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{judged}}).Match(node)
	return err == nil && ok
}

// keepsNodeKey says whether a node selector or node affinity on label key
// goes to the provider: not when it is about virtual nodes and, unless the
// provider lets the consumer place its pods, only for the labels that say
// what a workload runs on (PlacementLabels), not where.
func (o Origin) keepsNodeKey(key string) bool {
	return !isVirtualNodeKey(key) && (o.NodePlacement || slices.Contains(offloadv1alpha1.PlacementLabels, key))
}

// stripTerm returns term with only the expressions o keeps, and no fields.
func stripTerm(term corev1.NodeSelectorTerm, o Origin) corev1.NodeSelectorTerm {
	var out corev1.NodeSelectorTerm
	for _, e := range term.MatchExpressions {
		if o.keepsNodeKey(e.Key) {
			out.MatchExpressions = append(out.MatchExpressions, e)
		}
	}
	return out
}

// translateAffinity applies the node-placement rules, and keeps only the pod
// (anti-)affinity terms that can mean the same thing on the provider.
func translateAffinity(spec *corev1.PodSpec, local *corev1.Pod, o Origin) error {
	a := spec.Affinity
	if a == nil {
		return nil
	}
	if a.NodeAffinity != nil {
		na, err := remoteNodeAffinity(a.NodeAffinity, newVirtualNode(local, o), o)
		if err != nil {
			return err
		}
		a.NodeAffinity = na
	}
	if !o.NodePlacement {
		if pa := a.PodAffinity; pa != nil {
			pa.PreferredDuringSchedulingIgnoredDuringExecution = relaxPodTerms(pa.RequiredDuringSchedulingIgnoredDuringExecution, pa.PreferredDuringSchedulingIgnoredDuringExecution)
			pa.RequiredDuringSchedulingIgnoredDuringExecution = nil
		}
		if pa := a.PodAntiAffinity; pa != nil {
			pa.PreferredDuringSchedulingIgnoredDuringExecution = relaxPodTerms(pa.RequiredDuringSchedulingIgnoredDuringExecution, pa.PreferredDuringSchedulingIgnoredDuringExecution)
			pa.RequiredDuringSchedulingIgnoredDuringExecution = nil
		}
	}
	if a.PodAffinity != nil {
		a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution = remotePodTerms(
			a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution, local.Namespace, o.TwinNamespace)
		a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution = remoteWeightedPodTerms(
			a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution, local.Namespace, o.TwinNamespace)
		if len(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution) == 0 &&
			len(a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 0 {
			a.PodAffinity = nil
		}
	}
	if a.PodAntiAffinity != nil {
		a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution = remotePodTerms(
			a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, local.Namespace, o.TwinNamespace)
		a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution = remoteWeightedPodTerms(
			a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution, local.Namespace, o.TwinNamespace)
		if len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) == 0 &&
			len(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) == 0 {
			a.PodAntiAffinity = nil
		}
	}
	if a.NodeAffinity == nil && a.PodAffinity == nil && a.PodAntiAffinity == nil {
		spec.Affinity = nil
	}
	return nil
}

// remoteNodeAffinity applies the node-placement rules to na; nil means no
// node affinity is left.
func remoteNodeAffinity(na *corev1.NodeAffinity, vn virtualNode, o Origin) (*corev1.NodeAffinity, error) {
	if req := na.RequiredDuringSchedulingIgnoredDuringExecution; req != nil {
		var kept []corev1.NodeSelectorTerm
		matched, emptied := false, false
		for _, t := range req.NodeSelectorTerms {
			if !vn.matches(t) {
				continue
			}
			matched = true
			s := stripTerm(t, o)
			if len(s.MatchExpressions) == 0 {
				emptied = true
				break
			}
			kept = append(kept, s)
		}
		switch {
		case len(req.NodeSelectorTerms) == 0 || emptied:
			na.RequiredDuringSchedulingIgnoredDuringExecution = nil
		case !matched:
			return nil, &NotOffloadableError{Reasons: []string{
				fmt.Sprintf("its required node affinity excludes virtual node %q", vn.name)}}
		default:
			req.NodeSelectorTerms = kept
		}
	}
	var prefs []corev1.PreferredSchedulingTerm
	for _, p := range na.PreferredDuringSchedulingIgnoredDuringExecution {
		if !vn.matches(p.Preference) {
			continue
		}
		s := stripTerm(p.Preference, o)
		if len(s.MatchExpressions) == 0 {
			continue
		}
		prefs = append(prefs, corev1.PreferredSchedulingTerm{Weight: p.Weight, Preference: s})
	}
	na.PreferredDuringSchedulingIgnoredDuringExecution = prefs
	if na.RequiredDuringSchedulingIgnoredDuringExecution == nil && len(prefs) == 0 {
		return nil, nil
	}
	return na, nil
}

// remotePodTerm rewrites a pod (anti-)affinity term for the twin namespace.
// Terms that select pods of other namespaces (a namespaceSelector, or
// namespaces other than the pod's own) would select unrelated provider pods,
// and offload.io/ topology keys are missing on provider nodes: such terms are
// dropped, which can only widen placement.
func remotePodTerm(t corev1.PodAffinityTerm, localNS, twinNS string) (corev1.PodAffinityTerm, bool) {
	if t.NamespaceSelector != nil || isOffloadKey(t.TopologyKey) {
		return t, false
	}
	for _, ns := range t.Namespaces {
		if ns != localNS {
			return t, false
		}
	}
	if len(t.Namespaces) > 0 {
		t.Namespaces = []string{twinNS}
	}
	return t, true
}

func remotePodTerms(in []corev1.PodAffinityTerm, localNS, twinNS string) []corev1.PodAffinityTerm {
	var out []corev1.PodAffinityTerm
	for _, t := range in {
		if rt, ok := remotePodTerm(t, localNS, twinNS); ok {
			out = append(out, rt)
		}
	}
	return out
}

func remoteWeightedPodTerms(in []corev1.WeightedPodAffinityTerm, localNS, twinNS string) []corev1.WeightedPodAffinityTerm {
	var out []corev1.WeightedPodAffinityTerm
	for _, w := range in {
		if rt, ok := remotePodTerm(w.PodAffinityTerm, localNS, twinNS); ok {
			out = append(out, corev1.WeightedPodAffinityTerm{Weight: w.Weight, PodAffinityTerm: rt})
		}
	}
	return out
}
