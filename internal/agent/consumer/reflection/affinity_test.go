package reflection_test

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
)

func req(key string, op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: key, Operator: op, Values: values}
}

func term(rs ...corev1.NodeSelectorRequirement) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchExpressions: rs}
}

var (
	isVirtual   = req(offloadv1alpha1.LabelType, corev1.NodeSelectorOpIn, offloadv1alpha1.TypeVirtualNode)
	notVirtual  = req(offloadv1alpha1.LabelType, corev1.NodeSelectorOpNotIn, offloadv1alpha1.TypeVirtualNode)
	onProvider  = req(offloadv1alpha1.LabelRemoteClusterID, corev1.NodeSelectorOpIn, providerID)
	onOther     = req(offloadv1alpha1.LabelRemoteClusterID, corev1.NodeSelectorOpIn, "other-provider")
	inZoneA     = req(corev1.LabelTopologyZone, corev1.NodeSelectorOpIn, "a")
	withSSD     = req("disktype", corev1.NodeSelectorOpIn, "ssd")
	onHostVN    = req(corev1.LabelHostname, corev1.NodeSelectorOpIn, vnName)
	onHostOther = req(corev1.LabelHostname, corev1.NodeSelectorOpIn, "worker-1")
)

func TestRemotePodNodeAffinity(t *testing.T) {
	tests := []struct {
		name      string
		required  []corev1.NodeSelectorTerm
		preferred []corev1.PreferredSchedulingTerm
		exact     bool // origin carries the virtual node's labels
		want      *corev1.NodeAffinity
		wantErr   bool
	}{{
		name:     "a term only about virtual nodes leaves the pod free on the provider",
		required: []corev1.NodeSelectorTerm{term(isVirtual, onProvider)},
		want:     nil,
	}, {
		name:     "the user's expressions survive when the virtual-node ones are stripped",
		required: []corev1.NodeSelectorTerm{term(isVirtual, inZoneA, withSSD)},
		want: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{term(inZoneA, withSSD)}}},
	}, {
		name:     "a term for local nodes is dropped, not emptied into match-anything",
		required: []corev1.NodeSelectorTerm{term(notVirtual), term(isVirtual, inZoneA)},
		want: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{term(inZoneA)}}},
	}, {
		name:     "one term emptied by stripping makes the whole required affinity match anything",
		required: []corev1.NodeSelectorTerm{term(isVirtual, inZoneA), term(isVirtual, onProvider)},
		want:     nil,
	}, {
		name:     "with the virtual node's labels a term for another provider is dropped",
		required: []corev1.NodeSelectorTerm{term(isVirtual, onOther, withSSD), term(isVirtual, onProvider, inZoneA)},
		exact:    true,
		want: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{term(inZoneA)}}},
	}, {
		name:     "without the virtual node's labels unknown offload.io expressions count as satisfied",
		required: []corev1.NodeSelectorTerm{term(isVirtual, onOther, withSSD), term(isVirtual, onProvider, inZoneA)},
		want: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{term(withSSD), term(inZoneA)}}},
	}, {
		name:     "hostname terms name consumer nodes: one for another node is dropped, one for the virtual node stripped",
		required: []corev1.NodeSelectorTerm{term(onHostOther, withSSD), term(onHostVN, inZoneA)},
		want: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{term(inZoneA)}}},
	}, {
		name: "a metadata.name field naming the virtual node is stripped",
		required: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{
			req("metadata.name", corev1.NodeSelectorOpIn, vnName)}}},
		want: nil,
	}, {
		name:     "a required affinity no term of which admits the virtual node is refused",
		required: []corev1.NodeSelectorTerm{term(notVirtual, inZoneA)},
		wantErr:  true,
	}, {
		name: "preferences for local nodes or only about virtual nodes go, mixed ones are stripped",
		preferred: []corev1.PreferredSchedulingTerm{
			{Weight: 10, Preference: term(notVirtual, withSSD)},
			{Weight: 20, Preference: term(isVirtual)},
			{Weight: 30, Preference: term(onProvider, inZoneA)},
		},
		want: &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{
			{Weight: 30, Preference: term(inZoneA)}}},
	}, {
		name:      "required and preferred are translated independently",
		required:  []corev1.NodeSelectorTerm{term(isVirtual, withSSD)},
		preferred: []corev1.PreferredSchedulingTerm{{Weight: 5, Preference: term(inZoneA)}},
		want: &corev1.NodeAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution:  &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term(withSSD)}},
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 5, Preference: term(inZoneA)}},
		},
	}, {
		name:     "Gt and Lt on virtual-node keys are judged numerically",
		required: []corev1.NodeSelectorTerm{term(req("offload.io/generation", corev1.NodeSelectorOpGt, "3"), withSSD), term(req("offload.io/generation", corev1.NodeSelectorOpLt, "3"), inZoneA)},
		exact:    true,
		want: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{term(inZoneA)}}},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			local := offloadedPod()
			local.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				PreferredDuringSchedulingIgnoredDuringExecution: tt.preferred,
			}}
			if tt.required != nil {
				local.Spec.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{NodeSelectorTerms: tt.required}
			}
			// The virtual-node rules in full: without node placement only the
			// os and arch expressions would survive (see the test below).
			o := origin()
			o.NodePlacement = true
			if tt.exact {
				o.VirtualNodeLabels = vnLabels()
				o.VirtualNodeLabels["offload.io/generation"] = "2"
			}
			remote, err := reflection.RemotePod(local, o)
			if tt.wantErr {
				if err == nil {
					t.Fatal("RemotePod accepted a pod whose affinity excludes the virtual node")
				}
				return
			}
			if err != nil {
				t.Fatalf("RemotePod: %v", err)
			}
			var got *corev1.NodeAffinity
			if remote.Spec.Affinity != nil {
				got = remote.Spec.Affinity.NodeAffinity
			}
			assertEqual(t, "node affinity", tt.want, got)
		})
	}
}

func TestRemotePodPodAffinity(t *testing.T) {
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}
	local := offloadedPod()
	local.Spec.Affinity.PodAffinity = &corev1.PodAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
			{LabelSelector: sel, TopologyKey: corev1.LabelTopologyZone},
			{LabelSelector: sel, TopologyKey: corev1.LabelTopologyZone, Namespaces: []string{"db"}},
		},
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{
			{Weight: 1, PodAffinityTerm: corev1.PodAffinityTerm{LabelSelector: sel, TopologyKey: corev1.LabelHostname, NamespaceSelector: &metav1.LabelSelector{}}},
		},
	}
	local.Spec.Affinity.PodAntiAffinity = &corev1.PodAntiAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
			{LabelSelector: sel, TopologyKey: offloadv1alpha1.LabelRemoteClusterID},
		},
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{
			{Weight: 7, PodAffinityTerm: corev1.PodAffinityTerm{LabelSelector: sel, TopologyKey: corev1.LabelHostname, Namespaces: []string{"shop"}}},
		},
	}
	placing := origin()
	placing.NodePlacement = true
	remote := mustRemote(t, local, placing)

	t.Run("own-namespace terms are kept, with the namespace mapped to the twin", func(t *testing.T) {
		assertEqual(t, "pod affinity", &corev1.PodAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{LabelSelector: sel, TopologyKey: corev1.LabelTopologyZone}},
		}, remote.Spec.Affinity.PodAffinity)
		assertEqual(t, "pod anti-affinity", &corev1.PodAntiAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{
				{Weight: 7, PodAffinityTerm: corev1.PodAffinityTerm{LabelSelector: sel, TopologyKey: corev1.LabelHostname, Namespaces: []string{twinNS}}},
			},
		}, remote.Spec.Affinity.PodAntiAffinity)
	})
	t.Run("an affinity left with nothing disappears", func(t *testing.T) {
		local := offloadedPod()
		local.Spec.Affinity.PodAntiAffinity = &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
			{LabelSelector: sel, TopologyKey: "offload.io/remote-cluster-id"}}}
		if r := mustRemote(t, local, origin()); r.Spec.Affinity != nil {
			t.Errorf("affinity = %+v, want nil", r.Spec.Affinity)
		}
	})
	t.Run("without node placement, the required terms kept become preferences of weight 100", func(t *testing.T) {
		remote := mustRemote(t, local, origin())
		assertEqual(t, "pod affinity", &corev1.PodAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{
				{Weight: 100, PodAffinityTerm: corev1.PodAffinityTerm{LabelSelector: sel, TopologyKey: corev1.LabelTopologyZone}},
			},
		}, remote.Spec.Affinity.PodAffinity)
		assertEqual(t, "pod anti-affinity", &corev1.PodAntiAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{
				{Weight: 7, PodAffinityTerm: corev1.PodAffinityTerm{LabelSelector: sel, TopologyKey: corev1.LabelHostname, Namespaces: []string{twinNS}}},
			},
		}, remote.Spec.Affinity.PodAntiAffinity)
	})
}

// TestRemotePodNeverKeepsVirtualNodePlacement generates random pods and
// checks the invariants of every translation that succeeds.
func TestRemotePodNeverKeepsVirtualNodePlacement(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	keys := []string{offloadv1alpha1.LabelType, offloadv1alpha1.LabelRemoteClusterID, offloadv1alpha1.TaintVirtualNode, "offload.io/x",
		corev1.LabelHostname, "type", "disktype", corev1.LabelTopologyZone, corev1.LabelOSStable, corev1.TaintNodeUnreachable, corev1.TaintNodeNotReady, ""}
	ops := []corev1.NodeSelectorOperator{corev1.NodeSelectorOpIn, corev1.NodeSelectorOpNotIn, corev1.NodeSelectorOpExists, corev1.NodeSelectorOpDoesNotExist}
	values := []string{offloadv1alpha1.TypeVirtualNode, providerID, vnName, "virtual-kubelet", "ssd", "a"}
	pick := func(s []string) string { return s[rng.Intn(len(s))] }
	randTerm := func() corev1.NodeSelectorTerm {
		var t corev1.NodeSelectorTerm
		for range rng.Intn(4) {
			t.MatchExpressions = append(t.MatchExpressions, req(pick(keys[:len(keys)-1]), ops[rng.Intn(len(ops))], pick(values)))
		}
		if rng.Intn(5) == 0 {
			t.MatchFields = []corev1.NodeSelectorRequirement{req("metadata.name", corev1.NodeSelectorOpIn, pick(values))}
		}
		return t
	}

	translated := 0
	for i := range 2000 {
		local := offloadedPod()
		local.Spec.Tolerations = nil
		for range rng.Intn(6) {
			local.Spec.Tolerations = append(local.Spec.Tolerations, corev1.Toleration{Key: pick(keys), Operator: corev1.TolerationOpExists})
		}
		local.Spec.NodeSelector = map[string]string{}
		for range rng.Intn(4) {
			local.Spec.NodeSelector[pick(keys[:len(keys)-1])] = pick(values)
		}
		na := &corev1.NodeAffinity{}
		if rng.Intn(3) > 0 {
			na.RequiredDuringSchedulingIgnoredDuringExecution = &corev1.NodeSelector{}
			for range 1 + rng.Intn(3) {
				na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms = append(
					na.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms, randTerm())
			}
		}
		for range rng.Intn(3) {
			na.PreferredDuringSchedulingIgnoredDuringExecution = append(na.PreferredDuringSchedulingIgnoredDuringExecution,
				corev1.PreferredSchedulingTerm{Weight: int32(1 + rng.Intn(100)), Preference: randTerm()})
		}
		local.Spec.Affinity = &corev1.Affinity{NodeAffinity: na}
		o := origin()
		if rng.Intn(2) == 0 {
			o.VirtualNodeLabels = vnLabels()
		}
		o.NodePlacement = rng.Intn(2) == 0
		// placed says whether a key may reach the provider at all.
		placed := func(k string) bool { return o.NodePlacement || slices.Contains(offloadv1alpha1.PlacementLabels, k) }
		before := local.DeepCopy()

		remote, err := reflection.RemotePod(local, o)
		assertEqual(t, fmt.Sprintf("pod %d after RemotePod", i), before, local)
		if err != nil {
			continue
		}
		translated++
		if remote.Spec.NodeName != "" {
			t.Fatalf("pod %d: nodeName %q kept", i, remote.Spec.NodeName)
		}
		for _, tol := range remote.Spec.Tolerations {
			if strings.HasPrefix(tol.Key, "offload.io/") || tol.Key == corev1.TaintNodeUnreachable || tol.Key == corev1.TaintNodeNotReady || !o.NodePlacement {
				t.Fatalf("pod %d: toleration %v kept", i, tol)
			}
		}
		for k := range remote.Spec.NodeSelector {
			if strings.HasPrefix(k, "offload.io/") || k == corev1.LabelHostname || k == "type" || !placed(k) {
				t.Fatalf("pod %d: node selector %q kept", i, k)
			}
		}
		if a := remote.Spec.Affinity; a != nil && a.NodeAffinity != nil {
			var terms []corev1.NodeSelectorTerm
			if r := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution; r != nil {
				if len(r.NodeSelectorTerms) == 0 {
					t.Fatalf("pod %d: required node affinity without terms", i)
				}
				terms = append(terms, r.NodeSelectorTerms...)
			}
			for _, p := range a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
				terms = append(terms, p.Preference)
			}
			for _, tm := range terms {
				if len(tm.MatchExpressions) == 0 || len(tm.MatchFields) != 0 {
					t.Fatalf("pod %d: empty or field term %+v kept", i, tm)
				}
				for _, e := range tm.MatchExpressions {
					if strings.HasPrefix(e.Key, "offload.io/") || e.Key == corev1.LabelHostname || e.Key == "type" || !placed(e.Key) {
						t.Fatalf("pod %d: expression on %q kept", i, e.Key)
					}
				}
			}
		}
		again := mustRemote(t, remote, o)
		assertEqual(t, fmt.Sprintf("pod %d retranslated", i), remote.Spec, again.Spec)
	}
	if translated < 500 {
		t.Fatalf("only %d of 2000 random pods translated; the generator is too hostile to test much", translated)
	}
}
