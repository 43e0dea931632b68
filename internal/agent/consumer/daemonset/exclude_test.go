package daemonset

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

var (
	everyTaint  = corev1.Toleration{Operator: corev1.TolerationOpExists}
	virtualOnly = corev1.Toleration{Key: offloadv1alpha1.TaintVirtualNode, Operator: corev1.TolerationOpExists}
	noSchedule  = corev1.Toleration{Key: "node-role.kubernetes.io/control-plane", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}
	linuxOnly   = corev1.NodeSelectorRequirement{Key: "kubernetes.io/os", Operator: corev1.NodeSelectorOpIn, Values: []string{"linux"}}
	named       = corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"n1"}}
	// tainted: the cluster has virtual nodes, with their taint;
	// untainted: one of them lacks it.
	tainted   = VirtualNodes{Expected: true}
	untainted = VirtualNodes{Expected: true, Untainted: true}
)

func daemonSet(tolerations []corev1.Toleration, annotations map[string]string, affinity *corev1.Affinity) *appsv1.DaemonSet {
	return &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "agent", Namespace: "kube-system", Annotations: annotations},
		Spec: appsv1.DaemonSetSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{
			Tolerations: tolerations, Affinity: affinity,
			Containers: []corev1.Container{{Name: "agent", Image: "agent"}},
		}}},
	}
}

func required(terms ...corev1.NodeSelectorTerm) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}}
}

func term(reqs ...corev1.NodeSelectorRequirement) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchExpressions: reqs}
}

func TestDaemonSetsThatWouldLandOnVirtualNodesAreKeptOffThem(t *testing.T) {
	preferred := &corev1.Affinity{
		NodeAffinity:    &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 1, Preference: term(linuxOnly)}}},
		PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{TopologyKey: "kubernetes.io/hostname"}}},
	}
	withPreferred := preferred.DeepCopy()
	withPreferred.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = required(term(offVirtualNodes)).NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	tests := []struct {
		name         string
		ds           *appsv1.DaemonSet
		virtualNodes VirtualNodes
		want         *corev1.Affinity // nil: unchanged
	}{
		{"a DaemonSet tolerating every taint gets a term keeping it off virtual nodes",
			daemonSet([]corev1.Toleration{everyTaint}, nil, nil), tainted, required(term(offVirtualNodes))},
		{"one tolerating the virtual-node taint by name too",
			daemonSet([]corev1.Toleration{virtualOnly}, nil, nil), tainted, required(term(offVirtualNodes))},
		{"while a virtual node is untainted, one without tolerations",
			daemonSet(nil, nil, nil), untainted, required(term(offVirtualNodes))},
		{"and one that tolerates only other taints",
			daemonSet([]corev1.Toleration{noSchedule}, nil, nil), untainted, required(term(offVirtualNodes))},
		{"each of its own terms gets the requirement, fields and all, since terms are ORed",
			daemonSet([]corev1.Toleration{everyTaint}, nil, required(term(linuxOnly), corev1.NodeSelectorTerm{MatchFields: []corev1.NodeSelectorRequirement{named}})), tainted,
			required(term(linuxOnly, offVirtualNodes), corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{offVirtualNodes}, MatchFields: []corev1.NodeSelectorRequirement{named}})},
		{"its preferences and pod affinities are kept",
			daemonSet([]corev1.Toleration{everyTaint}, nil, preferred.DeepCopy()), tainted, withPreferred},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			original := tt.ds.DeepCopy()
			if !Reconcile(tt.ds, tt.virtualNodes) {
				t.Fatal("Reconcile reported no change")
			}
			if got := tt.ds.Spec.Template.Spec.Affinity; !apiequality.Semantic.DeepEqual(got, tt.want) {
				t.Errorf("affinity = %+v\nwant %+v", got, tt.want)
			}
			if tt.ds.Annotations[offloadv1alpha1.AnnotationVirtualNodesExcluded] != "true" {
				t.Errorf("annotations = %v; want the agent's mark", tt.ds.Annotations)
			}
			if Reconcile(tt.ds, tt.virtualNodes) {
				t.Error("a second Reconcile changed the DaemonSet again")
			}
			// Once there are no virtual nodes, the DaemonSet is what it was.
			if !Reconcile(tt.ds, VirtualNodes{}) {
				t.Fatal("Reconcile without virtual nodes reported no change")
			}
			if original.Annotations == nil && len(tt.ds.Annotations) == 0 {
				tt.ds.Annotations = nil
			}
			if !apiequality.Semantic.DeepEqual(tt.ds, original) {
				t.Errorf("after the virtual nodes went:\n%+v\nwant the original\n%+v", tt.ds.Spec.Template.Spec.Affinity, original.Spec.Template.Spec.Affinity)
			}
		})
	}
}

func TestDaemonSetsThatStayOffVirtualNodesOrOptInAreLeftAlone(t *testing.T) {
	allowed := map[string]string{offloadv1alpha1.AnnotationVirtualNodes: offloadv1alpha1.VirtualNodesAllowed}
	tests := []struct {
		name         string
		ds           *appsv1.DaemonSet
		virtualNodes VirtualNodes
	}{
		{"one that tolerates no virtual-node taint", daemonSet([]corev1.Toleration{noSchedule}, nil, nil), tainted},
		{"one without tolerations", daemonSet(nil, nil, nil), tainted},
		{"one that opts in", daemonSet([]corev1.Toleration{everyTaint}, allowed, nil), tainted},
		{"one that opts in, while a virtual node is untainted", daemonSet(nil, allowed, nil), untainted},
		{"any while the cluster has no virtual node", daemonSet([]corev1.Toleration{everyTaint}, nil, nil), VirtualNodes{}},
		{"one whose author already keeps it off virtual nodes",
			daemonSet([]corev1.Toleration{everyTaint}, nil, required(term(offVirtualNodes))), tainted},
		{"one whose author already keeps it off untainted virtual nodes",
			daemonSet(nil, nil, required(term(offVirtualNodes))), untainted},
		{"one whose author keeps it off virtual nodes, once there are none",
			daemonSet([]corev1.Toleration{everyTaint}, nil, required(term(offVirtualNodes))), VirtualNodes{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			original := tt.ds.DeepCopy()
			if Reconcile(tt.ds, tt.virtualNodes) || !apiequality.Semantic.DeepEqual(tt.ds, original) {
				t.Errorf("Reconcile changed it:\n%+v", tt.ds)
			}
		})
	}
}

func TestADaemonSetThatOptsInLaterGoesBackOntoVirtualNodes(t *testing.T) {
	ds := daemonSet([]corev1.Toleration{everyTaint}, map[string]string{"team": "net"}, required(term(linuxOnly)))
	original := ds.DeepCopy()
	Reconcile(ds, tainted)
	ds.Annotations[offloadv1alpha1.AnnotationVirtualNodes] = offloadv1alpha1.VirtualNodesAllowed
	if !Reconcile(ds, tainted) {
		t.Fatal("Reconcile of an opted-in DaemonSet changed nothing")
	}
	if !apiequality.Semantic.DeepEqual(ds.Spec.Template.Spec, original.Spec.Template.Spec) {
		t.Errorf("template = %+v; want the original %+v", ds.Spec.Template.Spec.Affinity, original.Spec.Template.Spec.Affinity)
	}
	if _, marked := ds.Annotations[offloadv1alpha1.AnnotationVirtualNodesExcluded]; marked {
		t.Errorf("annotations = %v; want the mark gone", ds.Annotations)
	}
}
