package network

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// A pod's updates wake the provider's answer only when they change what it
// reads: each wake lists every pod of the consumer's twin namespaces.
func TestOnlyPodUpdatesThatChangeAnAddressWakeTheProvidersAnswer(t *testing.T) {
	base := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "twin", Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{NodeName: "node-a"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.1.5",
			PodIPs: []corev1.PodIP{{IP: "10.244.1.5"}}},
	}
	changed := func(f func(*corev1.Pod)) *corev1.Pod {
		p := base.DeepCopy()
		f(p)
		return p
	}
	for _, tc := range []struct {
		name string
		cur  *corev1.Pod
		want bool
	}{
		{"a new address", changed(func(p *corev1.Pod) {
			p.Status.PodIP, p.Status.PodIPs = "10.244.1.6", []corev1.PodIP{{IP: "10.244.1.6"}}
		}), true},
		{"a second address", changed(func(p *corev1.Pod) { p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: "fd00::5"}) }), true},
		{"a binding", changed(func(p *corev1.Pod) { p.Spec.NodeName = "node-b" }), true},
		{"a phase", changed(func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }), true},
		{"a deletion", changed(func(p *corev1.Pod) { p.DeletionTimestamp = new(metav1.Now()) }), true},
		{"a label (a gateway's tunnel)", changed(func(p *corev1.Pod) { p.Labels["offload.io/tunnel"] = "in-x" }), true},
		{"a readiness condition", changed(func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}), false},
		{"a container status", changed(func(p *corev1.Pod) {
			p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "app", Ready: true, RestartCount: 1}}
		}), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := podAddressChanged().Update(event.UpdateEvent{ObjectOld: base, ObjectNew: tc.cur}); got != tc.want {
				t.Errorf("wakes: %v, want %v", got, tc.want)
			}
		})
	}
}
