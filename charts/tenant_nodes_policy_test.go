package charts_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

// The provider's choice in this test: the nodes labelled pool=tenants and
// zone=a, tainted dedicated=tenants:NoSchedule.
var (
	chosenNodes      = map[string]string{"pool": "tenants", "zone": "a"}
	chosenToleration = corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "tenants", Effect: corev1.TaintEffectNoSchedule}
)

// chosenNamespace is a tenant namespace annotated with the provider's
// choice, as the remotenamespace controller writes it, and with extra
// labels.
func chosenNamespace(t *testing.T, kube kubernetes.Interface, extra map[string]string) string {
	t.Helper()
	ns := tenantNamespace(t, kube, extra)
	namespace, err := kube.CoreV1().Namespaces().Get(t.Context(), ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	namespace.Annotations = map[string]string{
		offloadv1alpha1.AnnotationNodeSelector: offloadv1alpha1.NodeSelectorString(chosenNodes),
		offloadv1alpha1.AnnotationTolerations:  offloadv1alpha1.TolerationsString([]corev1.Toleration{chosenToleration}),
	}
	if _, err := kube.CoreV1().Namespaces().Update(t.Context(), namespace, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return ns
}

func TestTheTenantPoliciesKeepPodsOnTheNodesTheProviderChose(t *testing.T) {
	kube := enforcedPolicy(t, offloadv1alpha1.PodPolicyName)
	enforcedPolicy(t, offloadv1alpha1.PodNodesPolicyName)
	chosen := chosenNamespace(t, kube, nil)
	placing := chosenNamespace(t, kube, map[string]string{offloadv1alpha1.LabelNodePlacement: offloadv1alpha1.NodePlacementAllowed})
	unchosen := tenantNamespace(t, kube, nil)
	onChosenNodes := func(s *corev1.PodSpec) {
		s.NodeSelector = map[string]string{"pool": "tenants", "zone": "a", "kubernetes.io/os": "linux"}
		s.Tolerations = []corev1.Toleration{chosenToleration}
	}

	// The policy reads the namespace's annotations a moment after they are
	// written: until then a pod without the selector is admitted.
	waitRefused := func(t *testing.T, ns string, pod *corev1.Pod) error {
		t.Helper()
		var err error
		framework.Eventually(t, 30*time.Second, "the chosen nodes are not enforced in namespace "+ns, func(ctx context.Context) bool {
			_, err = kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
			return apierrors.IsForbidden(err)
		})
		return err
	}
	for _, ns := range []struct{ what, name string }{{"a tenant namespace", chosen}, {"a tenant namespace with node placement", placing}} {
		t.Run("in "+ns.what+", a pod that selects the chosen nodes and tolerates their taint is admitted", func(t *testing.T) {
			mustCreate(t, kube, newPod(ns.name, "on-chosen-nodes", onChosenNodes))
		})
		t.Run("in "+ns.what+", a pod that selects only some of the chosen labels is refused, naming them", func(t *testing.T) {
			err := waitRefused(t, ns.name, newPod(ns.name, "half-chosen", func(s *corev1.PodSpec) {
				onChosenNodes(s)
				s.NodeSelector["zone"] = "b"
			}))
			// Where node placement is not allowed, the other policy refuses
			// it too, saying what the pod may select; either says which
			// labels the provider chose.
			wants := []string{"does not select zone=a", "--node-selector"}
			if ns.name == chosen {
				wants = []string{"zone", "the labels it chose for them"}
			}
			for _, want := range append(wants, "pool=tenants, zone=a") {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the refusal %q does not say %q", err, want)
				}
			}
		})
		t.Run("in "+ns.what+", a pod that selects no node is refused", func(t *testing.T) {
			if err := waitRefused(t, ns.name, newPod(ns.name, "anywhere", nil)); !strings.Contains(err.Error(), "does not select pool=tenants, zone=a") {
				t.Errorf("the refusal %q does not name the missing labels", err)
			}
		})
	}
	t.Run("in a tenant namespace, a pod that tolerates another taint than the chosen one is refused", func(t *testing.T) {
		_, err := kube.CoreV1().Pods(chosen).Create(t.Context(), newPod(chosen, "other-taint", func(s *corev1.PodSpec) {
			onChosenNodes(s)
			s.Tolerations = append(s.Tolerations, corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "batch", Effect: corev1.TaintEffectNoSchedule})
		}), metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "tolerate dedicated=batch:NoSchedule:") || !strings.Contains(err.Error(), "(dedicated=tenants:NoSchedule)") {
			t.Errorf("creating the pod: got %v, want it forbidden naming dedicated=batch:NoSchedule and the chosen toleration", err)
		}
	})
	t.Run("in a tenant namespace, the chosen toleration does not stretch to every effect", func(t *testing.T) {
		_, err := kube.CoreV1().Pods(chosen).Create(t.Context(), newPod(chosen, "every-effect", func(s *corev1.PodSpec) {
			onChosenNodes(s)
			s.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "tenants"}}
		}), metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("creating the pod: got %v, want it forbidden", err)
		}
	})
	t.Run("in a tenant namespace without a choice, the chosen toleration is refused like any other", func(t *testing.T) {
		_, err := kube.CoreV1().Pods(unchosen).Create(t.Context(), newPod(unchosen, "tolerates", func(s *corev1.PodSpec) {
			s.Tolerations = []corev1.Toleration{chosenToleration}
		}), metav1.CreateOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("creating the pod: got %v, want it forbidden", err)
		}
	})
	t.Run("in a tenant namespace without a choice, a pod asking for nothing is admitted", func(t *testing.T) {
		mustCreate(t, kube, newPod(unchosen, "anywhere", nil))
	})
}
