package podreflection

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

// A DaemonSet pod the DaemonSet controller binds to the virtual node before
// the agent keeps its DaemonSet off virtual nodes never reaches the
// provider; one whose DaemonSet opted in does. One whose pods tolerate
// nothing can only land on an untainted virtual node, where every
// DaemonSet is kept off.
func TestAPodOfADaemonSetKeptOffVirtualNodesIsNotSent(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	node, err := e.kube.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: e.node,
		Labels: map[string]string{offloadv1alpha1.LabelType: offloadv1alpha1.TypeVirtualNode}},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{offloadv1alpha1.VirtualNodeTaint()}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.kube.CoreV1().Nodes().Delete(context.Background(), node.Name, metav1.DeleteOptions{}) })
	everyTaint := []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		tolerations []corev1.Toleration
		untainted   bool
		sent        bool
	}{
		{"logs", nil, everyTaint, false, false},
		{"edge", map[string]string{offloadv1alpha1.AnnotationVirtualNodes: offloadv1alpha1.VirtualNodesAllowed}, everyTaint, false, true},
		{"plain", nil, nil, true, false},
	} {
		if offloadv1alpha1.VirtualNodeUntainted(node) != tc.untainted {
			node.Spec.Taints = nil
			if !tc.untainted {
				node.Spec.Taints = []corev1.Taint{offloadv1alpha1.VirtualNodeTaint()}
			}
			if node, err = e.kube.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		labels := map[string]string{"app": tc.name}
		ds, err := e.kube.AppsV1().DaemonSets(e.consumer).Create(ctx, &appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: tc.name, Annotations: tc.annotations},
			Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Tolerations: tc.tolerations,
					Containers: []corev1.Container{{Name: "app", Image: "registry.example/app:1"}}},
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod := e.localPod(t, tc.name+"-x1")
		pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID, Controller: ptr.To(true)}}
		err = e.h.CreatePod(ctx, pod)
		remote := e.getRemote(ctx, t, pod.Name)
		switch {
		case tc.sent && (err != nil || remote == nil):
			t.Errorf("%s opted in: CreatePod = %v, remote pod %v; want it sent", tc.name, err, remote != nil)
		case !tc.sent && (err == nil || !strings.Contains(err.Error(), offloadv1alpha1.AnnotationVirtualNodes)):
			t.Errorf("%s: CreatePod = %v; want an error that names %s", tc.name, err, offloadv1alpha1.AnnotationVirtualNodes)
		case !tc.sent && remote != nil:
			t.Errorf("%s: the pod reached the provider", tc.name)
		}
	}
}
