package reflection_test

import (
	"encoding/json"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
)

// FuzzRemotePod translates arbitrary pods. RemotePod never panics and
// never changes its input; what it sends to the provider never sets a
// node name, a host namespace or a hostPath, never carries a provider
// token, and, unless the provider allows node placement, tolerates no
// taint and selects nodes only by the placement labels: nothing the
// provider's admission would refuse for placement.
func FuzzRemotePod(f *testing.F) {
	seed, err := json.Marshal(offloadedPod())
	if err != nil {
		f.Fatal(err)
	}
	f.Add(seed, false)
	f.Add(seed, true)
	for _, s := range []string{
		`{"spec":{"nodeName":"n","tolerations":[{"operator":"Exists"}],"nodeSelector":{"kubernetes.io/hostname":"n","kubernetes.io/os":"linux"}}}`,
		`{"spec":{"hostNetwork":true,"volumes":[{"name":"r","hostPath":{"path":"/"}}]}}`,
		`{"spec":{"affinity":{"nodeAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":{"nodeSelectorTerms":[{"matchExpressions":[{"key":"disk","operator":"In","values":["ssd"]},{"key":"kubernetes.io/arch","operator":"In","values":["amd64"]}]}]}}}}}`,
		`{"spec":{"affinity":{"podAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[{"topologyKey":"k","namespaceSelector":{}}]}}}}`,
		`{"spec":{"affinity":{"podAntiAffinity":{"requiredDuringSchedulingIgnoredDuringExecution":[{"topologyKey":"kubernetes.io/hostname"}]}},"topologySpreadConstraints":[{"maxSkew":1,"topologyKey":"kubernetes.io/hostname","whenUnsatisfiable":"DoNotSchedule","minDomains":2}],"nodeSelector":{"pool":"mine"}}}`,
		`{"spec":{"containers":[{"name":"c","volumeMounts":[{"name":"kube-api-access-x","mountPath":"/var/run/secrets/kubernetes.io/serviceaccount"}]}],"volumes":[{"name":"kube-api-access-x","projected":{"sources":[{"serviceAccountToken":{"path":"token"}}]}}]}}`,
	} {
		f.Add([]byte(s), false)
	}
	f.Fuzz(func(t *testing.T, data []byte, placement bool) {
		var local corev1.Pod
		if err := json.Unmarshal(data, &local); err != nil {
			return
		}
		before := local.DeepCopy()
		o := origin()
		o.NodePlacement = placement
		o.NodeSelector = tenantNodes
		o.Tolerations = []corev1.Toleration{tenantToleration}
		remote, err := reflection.RemotePod(&local, o)
		if !equality.Semantic.DeepEqual(before, &local) {
			t.Fatal("RemotePod changed its input")
		}
		if err != nil {
			return
		}
		s := remote.Spec
		if s.NodeName != "" || s.HostNetwork || s.HostPID || s.HostIPC {
			t.Fatalf("the remote pod keeps node name %q or a host namespace", s.NodeName)
		}
		for _, v := range s.Volumes {
			if v.HostPath != nil {
				t.Fatalf("the remote pod keeps hostPath volume %q", v.Name)
			}
		}
		if s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken {
			t.Fatal("the remote pod may mount a provider token")
		}
		for k, v := range tenantNodes {
			if s.NodeSelector[k] != v {
				t.Fatalf("the remote pod selects %v, not the nodes the provider chose %v", s.NodeSelector, tenantNodes)
			}
		}
		if !hasToleration(s.Tolerations, tenantToleration) {
			t.Fatalf("the remote pod tolerates %v, not the taint the provider chose", s.Tolerations)
		}
		if placement {
			return
		}
		for _, tol := range s.Tolerations {
			if !tol.MatchToleration(&tenantToleration) {
				t.Fatalf("without node placement the remote pod tolerates %v", tol)
			}
		}
		placed := func(k string) bool { return slices.Contains(offloadv1alpha1.PlacementLabels, k) }
		for k := range s.NodeSelector {
			if !placed(k) && tenantNodes[k] == "" {
				t.Fatalf("without node placement the remote pod selects nodes by %q", k)
			}
		}
		for _, c := range s.TopologySpreadConstraints {
			if c.WhenUnsatisfiable != corev1.ScheduleAnyway {
				t.Fatalf("without node placement the remote pod spreads with %q", c.WhenUnsatisfiable)
			}
		}
		if a := s.Affinity; a != nil && ((a.PodAffinity != nil && len(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0) ||
			(a.PodAntiAffinity != nil && len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0)) {
			t.Fatal("without node placement the remote pod has required pod (anti-)affinity")
		}
		if a := s.Affinity; a != nil && a.NodeAffinity != nil {
			var terms []corev1.NodeSelectorTerm
			if r := a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution; r != nil {
				terms = append(terms, r.NodeSelectorTerms...)
			}
			for _, p := range a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
				terms = append(terms, p.Preference)
			}
			for _, term := range terms {
				if len(term.MatchFields) > 0 {
					t.Fatalf("without node placement the remote pod matches node fields %v", term.MatchFields)
				}
				for _, e := range term.MatchExpressions {
					if !placed(e.Key) {
						t.Fatalf("without node placement the remote pod's node affinity uses %q", e.Key)
					}
				}
			}
		}
	})
}
