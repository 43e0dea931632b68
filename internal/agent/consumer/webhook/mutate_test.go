package webhook

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

func req(key string, op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: key, Operator: op, Values: values}
}

func term(reqs ...corev1.NodeSelectorRequirement) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchExpressions: reqs}
}

func required(terms ...corev1.NodeSelectorTerm) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms},
	}}
}

var (
	inVirtual  = req(offloadv1alpha1.LabelType, corev1.NodeSelectorOpIn, offloadv1alpha1.TypeVirtualNode)
	notVirtual = req(offloadv1alpha1.LabelType, corev1.NodeSelectorOpNotIn, offloadv1alpha1.TypeVirtualNode)
	peerA      = req(offloadv1alpha1.LabelRemoteClusterID, corev1.NodeSelectorOpIn, "a")
	peerB      = req(offloadv1alpha1.LabelRemoteClusterID, corev1.NodeSelectorOpIn, "b")
	zoneX      = req("topology.kubernetes.io/zone", corev1.NodeSelectorOpIn, "x")
	gpu        = req("gpu", corev1.NodeSelectorOpExists)

	virtualToleration = corev1.Toleration{Key: offloadv1alpha1.TaintVirtualNode, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}
)

// lifecycle returns the unreachable and not-ready tolerations for seconds.
func lifecycle(seconds *int64) []corev1.Toleration {
	return []corev1.Toleration{
		{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: seconds},
		{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: seconds},
	}
}

// offloadTolerations are the tolerations a Remote or LocalAndRemote pod
// without any gets.
func offloadTolerations(seconds *int64) []corev1.Toleration {
	return append([]corev1.Toleration{virtualToleration}, lifecycle(seconds)...)
}

func offloading(strategy offloadv1alpha1.PodOffloadingStrategy, selector ...corev1.NodeSelectorTerm) *offloadv1alpha1.NamespaceOffloading {
	no := &offloadv1alpha1.NamespaceOffloading{
		ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.NamespaceOffloadingName, Namespace: "demo"},
		Spec:       offloadv1alpha1.NamespaceOffloadingSpec{PodOffloadingStrategy: strategy},
	}
	if selector != nil {
		no.Spec.ClusterSelector = &corev1.NodeSelector{NodeSelectorTerms: selector}
	}
	return no
}

func newPod(edit ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "demo"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web", Image: "nginx"}}},
	}
	for _, e := range edit {
		e(p)
	}
	return p
}

func withAffinity(a *corev1.Affinity) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.Affinity = a }
}

func withTolerations(ts ...corev1.Toleration) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Spec.Tolerations = ts }
}

func ownedBy(apiVersion, kind string) func(*corev1.Pod) {
	return func(p *corev1.Pod) {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: apiVersion, Kind: kind, Name: "owner", UID: "1", Controller: ptr.To(true)}}
	}
}

// defaultTolerations are those the DefaultTolerationSeconds plugin adds.
var defaultTolerations = lifecycle(ptr.To[int64](300))

func TestMutate(t *testing.T) {
	preferred := []corev1.PreferredSchedulingTerm{{Weight: 10, Preference: term(zoneX)}}
	withPreferred := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution:  &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{term(zoneX), term(gpu)}},
		PreferredDuringSchedulingIgnoredDuringExecution: preferred,
	}}
	podAntiAffinity := &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{{
		Weight: 1, PodAffinityTerm: corev1.PodAffinityTerm{TopologyKey: "kubernetes.io/hostname"},
	}}}
	tests := []struct {
		name            string
		pod             *corev1.Pod
		no              *offloadv1alpha1.NamespaceOffloading
		opts            Options
		wantChanged     bool
		wantAffinity    *corev1.Affinity
		wantTolerations []corev1.Toleration
	}{
		{
			name: "a pod of a namespace without NamespaceOffloading is left alone",
			pod:  newPod(), no: nil,
		},
		{
			name: "a DaemonSet pod is left alone, so it never tolerates virtual nodes",
			pod:  newPod(ownedBy("apps/v1", "DaemonSet")), no: offloading(offloadv1alpha1.Remote),
		},
		{
			name: "a pod already bound to a node is left alone",
			pod:  newPod(func(p *corev1.Pod) { p.Spec.NodeName = "worker" }), no: offloading(offloadv1alpha1.Remote),
		},
		{
			name: "a pod is left alone while its namespace's offloading is deleted",
			pod:  newPod(),
			no: func() *offloadv1alpha1.NamespaceOffloading {
				no := offloading(offloadv1alpha1.Remote)
				no.DeletionTimestamp = ptr.To(metav1.Now())
				return no
			}(),
		},
		{
			name: "a pod is left alone under an unknown strategy",
			pod:  newPod(), no: offloading("Elsewhere"),
		},
		{
			name: "a ReplicaSet pod is mutated",
			pod:  newPod(ownedBy("apps/v1", "ReplicaSet")), no: offloading(offloadv1alpha1.Remote),
			wantChanged: true, wantAffinity: required(term(inVirtual)), wantTolerations: offloadTolerations(nil),
		},
		{
			name: "Local keeps pods off virtual nodes and adds no toleration",
			pod:  newPod(withTolerations(defaultTolerations...)), no: offloading(offloadv1alpha1.Local),
			wantChanged: true, wantAffinity: required(term(notVirtual)), wantTolerations: defaultTolerations,
		},
		{
			name: "Local ANDs its requirement into each of the pod's terms",
			pod:  newPod(withAffinity(required(term(zoneX), term(gpu)))), no: offloading(offloadv1alpha1.Local),
			wantChanged: true, wantAffinity: required(term(zoneX, notVirtual), term(gpu, notVirtual)),
		},
		{
			name: "Remote without selector sends pods to any virtual node, tolerated for ever",
			pod:  newPod(), no: offloading(offloadv1alpha1.Remote),
			wantChanged: true, wantAffinity: required(term(inVirtual)), wantTolerations: offloadTolerations(nil),
		},
		{
			name: "Remote with a selector of no terms selects every peer",
			pod:  newPod(), no: offloading(offloadv1alpha1.Remote, []corev1.NodeSelectorTerm{}...),
			wantChanged: true, wantAffinity: required(term(inVirtual)), wantTolerations: offloadTolerations(nil),
		},
		{
			name: "Remote adds the virtual-node requirement to each selector term",
			pod:  newPod(), no: offloading(offloadv1alpha1.Remote, term(peerA), term(peerB, zoneX)),
			wantChanged: true, wantAffinity: required(term(peerA, inVirtual), term(peerB, zoneX, inVirtual)),
			wantTolerations: offloadTolerations(nil),
		},
		{
			name: "Remote crosses the pod's terms with the selector's and keeps preferred terms and pod affinity",
			pod: newPod(withAffinity(&corev1.Affinity{
				NodeAffinity:    withPreferred.NodeAffinity.DeepCopy(),
				PodAntiAffinity: podAntiAffinity,
			})),
			no:          offloading(offloadv1alpha1.Remote, term(peerA), term(peerB)),
			wantChanged: true,
			wantAffinity: &corev1.Affinity{
				NodeAffinity: &corev1.NodeAffinity{
					RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
						term(zoneX, peerA, inVirtual), term(zoneX, peerB, inVirtual),
						term(gpu, peerA, inVirtual), term(gpu, peerB, inVirtual),
					}},
					PreferredDuringSchedulingIgnoredDuringExecution: preferred,
				},
				PodAntiAffinity: podAntiAffinity,
			},
			wantTolerations: offloadTolerations(nil),
		},
		{
			name:        "Remote keeps a pod term that already asks for a selected virtual node",
			pod:         newPod(withAffinity(required(term(peerA, inVirtual), term(zoneX)))),
			no:          offloading(offloadv1alpha1.Remote, term(peerA)),
			wantChanged: true, wantAffinity: required(term(peerA, inVirtual), term(zoneX, peerA, inVirtual)),
			wantTolerations: offloadTolerations(nil),
		},
		{
			name:        "Remote keeps an empty pod term, which matches no node",
			pod:         newPod(withAffinity(required(corev1.NodeSelectorTerm{}))),
			no:          offloading(offloadv1alpha1.Remote),
			wantChanged: true, wantAffinity: required(corev1.NodeSelectorTerm{}), wantTolerations: offloadTolerations(nil),
		},
		{
			name: "Remote whose selector has only empty terms, which match nothing, lets the pod run nowhere",
			pod:  newPod(), no: offloading(offloadv1alpha1.Remote, corev1.NodeSelectorTerm{}),
			wantChanged: true, wantAffinity: required(term(inVirtual, notVirtual)), wantTolerations: offloadTolerations(nil),
		},
		{
			name: "Remote replaces the 300 s default tolerations with the configured ones and keeps the others",
			pod: newPod(withTolerations(append([]corev1.Toleration{
				{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "batch", Effect: corev1.TaintEffectNoSchedule},
			}, defaultTolerations...)...)),
			no: offloading(offloadv1alpha1.Remote), opts: Options{TolerationSeconds: ptr.To[int64](3600)},
			wantChanged: true, wantAffinity: required(term(inVirtual)),
			wantTolerations: append([]corev1.Toleration{
				{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "batch", Effect: corev1.TaintEffectNoSchedule},
			}, append(lifecycle(ptr.To[int64](3600)), virtualToleration)...),
		},
		{
			name: "the default tolerations are replaced by unlimited ones, and a NoSchedule not-ready toleration is kept",
			pod: newPod(withTolerations(append([]corev1.Toleration{
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
			}, defaultTolerations...)...)),
			no:          offloading(offloadv1alpha1.LocalAndRemote),
			wantChanged: true,
			wantTolerations: append([]corev1.Toleration{
				{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
			}, append(lifecycle(nil), virtualToleration)...),
		},
		{
			name:        "a pod that tolerates every taint gets no virtual-node toleration",
			pod:         newPod(withTolerations(corev1.Toleration{Operator: corev1.TolerationOpExists})),
			no:          offloading(offloadv1alpha1.Remote),
			wantChanged: true, wantAffinity: required(term(inVirtual)),
			wantTolerations: append([]corev1.Toleration{{Operator: corev1.TolerationOpExists}}, lifecycle(nil)...),
		},
		{
			name: "LocalAndRemote without selector only adds tolerations",
			pod:  newPod(withAffinity(withPreferred.DeepCopy())), no: offloading(offloadv1alpha1.LocalAndRemote),
			wantChanged: true, wantAffinity: withPreferred, wantTolerations: offloadTolerations(nil),
		},
		{
			name: "an empty strategy is LocalAndRemote",
			pod:  newPod(), no: offloading(""),
			wantChanged: true, wantTolerations: offloadTolerations(nil),
		},
		{
			name: "LocalAndRemote with a selector allows local nodes or selected virtual nodes",
			pod:  newPod(), no: offloading(offloadv1alpha1.LocalAndRemote, term(peerA), term(peerB)),
			wantChanged: true, wantAffinity: required(term(notVirtual), term(peerA, inVirtual), term(peerB, inVirtual)),
			wantTolerations: offloadTolerations(nil),
		},
		{
			name: "LocalAndRemote with a selector crosses the pod's own terms",
			pod:  newPod(withAffinity(required(term(zoneX)))), no: offloading(offloadv1alpha1.LocalAndRemote, term(peerA)),
			wantChanged: true, wantAffinity: required(term(zoneX, notVirtual), term(zoneX, peerA, inVirtual)),
			wantTolerations: offloadTolerations(nil),
		},
		{
			name: "LocalAndRemote whose selector matches nothing is Local with tolerations",
			pod:  newPod(), no: offloading(offloadv1alpha1.LocalAndRemote, corev1.NodeSelectorTerm{}),
			wantChanged: true, wantAffinity: required(term(notVirtual)), wantTolerations: offloadTolerations(nil),
		},
		{
			name:         "a pod that already has everything is unchanged",
			pod:          newPod(withAffinity(required(term(inVirtual))), withTolerations(offloadTolerations(nil)...)),
			no:           offloading(offloadv1alpha1.Remote),
			wantAffinity: required(term(inVirtual)), wantTolerations: offloadTolerations(nil),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := tt.pod.DeepCopy()
			original := tt.pod.DeepCopy()
			changed := Mutate(pod, tt.no, tt.opts)
			if changed != tt.wantChanged {
				t.Errorf("Mutate changed = %t, want %t", changed, tt.wantChanged)
			}
			if !changed && !apiequality.Semantic.DeepEqual(pod, original) {
				t.Errorf("Mutate reported no change but changed the pod:\n%s", toYAML(t, pod.Spec))
			}
			if changed || tt.wantAffinity != nil || tt.wantTolerations != nil {
				if !apiequality.Semantic.DeepEqual(pod.Spec.Affinity, tt.wantAffinity) {
					t.Errorf("affinity:\n%s\nwant:\n%s", toYAML(t, pod.Spec.Affinity), toYAML(t, tt.wantAffinity))
				}
				if !apiequality.Semantic.DeepEqual(pod.Spec.Tolerations, tt.wantTolerations) {
					t.Errorf("tolerations:\n%s\nwant:\n%s", toYAML(t, pod.Spec.Tolerations), toYAML(t, tt.wantTolerations))
				}
			}
			once := pod.DeepCopy()
			if Mutate(pod, tt.no, tt.opts) || !apiequality.Semantic.DeepEqual(pod, once) {
				t.Errorf("a second Mutate changed the pod:\n%s\nafter the first:\n%s", toYAML(t, pod.Spec), toYAML(t, once.Spec))
			}
		})
	}
}

func TestMutateDoesNotShareTheOptionsTolerationSeconds(t *testing.T) {
	opts := Options{TolerationSeconds: ptr.To[int64](60)}
	pod := newPod()
	Mutate(pod, offloading(offloadv1alpha1.Remote), opts)
	*pod.Spec.Tolerations[1].TolerationSeconds = 1
	if *opts.TolerationSeconds != 60 {
		t.Errorf("editing the pod's toleration changed the options to %d", *opts.TolerationSeconds)
	}
}

func toYAML(t *testing.T, v any) string {
	t.Helper()
	out, err := yaml.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}
