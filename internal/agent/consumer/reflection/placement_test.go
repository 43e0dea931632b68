package reflection_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
)

// The provider's choice in these tests: the nodes labelled pool=tenants,
// tainted dedicated=tenants:NoSchedule.
var (
	tenantNodes      = map[string]string{"pool": "tenants"}
	tenantToleration = corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "tenants", Effect: corev1.TaintEffectNoSchedule}
)

func TestRemotePodsRunOnTheNodesTheProviderChose(t *testing.T) {
	for _, placement := range []bool{false, true} {
		o := origin()
		o.NodePlacement = placement
		o.NodeSelector = tenantNodes
		o.Tolerations = []corev1.Toleration{tenantToleration}
		name := map[bool]string{false: "without node placement", true: "with node placement"}[placement]

		t.Run(name+", a pod asking for nothing gets the provider's selector and toleration", func(t *testing.T) {
			r := mustRemote(t, offloadedPod(), o)
			assertEqual(t, "node selector", tenantNodes, r.Spec.NodeSelector)
			if !hasToleration(r.Spec.Tolerations, tenantToleration) {
				t.Errorf("tolerations %v lack the provider's %v", r.Spec.Tolerations, tenantToleration)
			}
		})
		t.Run(name+", the provider's selector wins over the consumer's on the same key", func(t *testing.T) {
			local := offloadedPod()
			local.Spec.NodeSelector = map[string]string{"pool": "mine", "kubernetes.io/os": "linux"}
			r := mustRemote(t, local, o)
			assertEqual(t, "node selector", map[string]string{"pool": "tenants", "kubernetes.io/os": "linux"}, r.Spec.NodeSelector)
		})
		t.Run(name+", a toleration the consumer already has is not repeated", func(t *testing.T) {
			local := offloadedPod()
			local.Spec.Tolerations = append(local.Spec.Tolerations, tenantToleration)
			r := mustRemote(t, local, o)
			n := 0
			for _, have := range r.Spec.Tolerations {
				if have.MatchToleration(&tenantToleration) {
					n++
				}
			}
			if n != 1 {
				t.Errorf("tolerations %v hold the provider's %d times, want once", r.Spec.Tolerations, n)
			}
		})
		t.Run(name+", an update keeps the provider's choice and changes nothing", func(t *testing.T) {
			local := offloadedPod()
			r := mustRemote(t, local, o)
			if changed, err := reflection.SpecChanged(r, local, o); err != nil || changed {
				t.Errorf("SpecChanged = %v, %v; want no change", changed, err)
			}
		})
	}
}

func TestWithoutNodePlacementHardSpreadingBecomesAPreference(t *testing.T) {
	spread := func(when corev1.UnsatisfiableConstraintAction, minDomains *int32) []corev1.TopologySpreadConstraint {
		return []corev1.TopologySpreadConstraint{{
			MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: when, MinDomains: minDomains,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}},
		}}
	}
	local := offloadedPod()
	local.Spec.TopologySpreadConstraints = spread(corev1.DoNotSchedule, ptr.To[int32](3))

	t.Run("a DoNotSchedule spread becomes ScheduleAnyway, without minDomains (only DoNotSchedule may have them)", func(t *testing.T) {
		assertEqual(t, "spread", spread(corev1.ScheduleAnyway, nil), mustRemote(t, local, origin()).Spec.TopologySpreadConstraints)
	})
	t.Run("with node placement it is kept as it is", func(t *testing.T) {
		o := origin()
		o.NodePlacement = true
		assertEqual(t, "spread", local.Spec.TopologySpreadConstraints, mustRemote(t, local, o).Spec.TopologySpreadConstraints)
	})
}

func hasToleration(ts []corev1.Toleration, want corev1.Toleration) bool {
	for _, t := range ts {
		if t.MatchToleration(&want) {
			return true
		}
	}
	return false
}
