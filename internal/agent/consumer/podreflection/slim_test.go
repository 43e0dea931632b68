package podreflection

import (
	"context"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/agent/consumer/reflection"
	"github.com/kubectl-offload/kubectl-offload/test/framework"
)

// The twin informer keeps what the handler reads of a remote pod, and an
// orphan's token Secret, found through the volume the slim pod keeps, goes
// with it.
func TestTheTwinInformerKeepsWhatTheHandlerReadsAndAnOrphansTokenGoesWithIt(t *testing.T) {
	e := newEnv(t)
	ctx := t.Context()
	local := tokenPod(t, e, "api-client")
	if err := e.h.CreatePod(ctx, local); err != nil {
		t.Fatalf("CreatePod: %v", err)
	}
	ti, err := e.h.informer(e.twin, e.consumer)
	if err != nil {
		t.Fatal(err)
	}
	var cached *corev1.Pod
	framework.Eventually(t, waitTimeout, "the remote pod in the twin informer", func(context.Context) bool {
		cached, _ = ti.lister.Pods(e.twin).Get(local.Name)
		return cached != nil
	})
	remote := e.getRemote(ctx, t, local.Name)
	if len(cached.Spec.Volumes) != 1 || !hasTokenVolume(cached) || !hasTokenVolume(remote) {
		t.Errorf("cached volumes %+v, want only the token volume of %+v", cached.Spec.Volumes, remote.Spec.Volumes)
	}
	if c := cached.Spec.Containers; len(c) != 1 || c[0].Name != "app" || c[0].Image != "registry.example/app:1" ||
		len(c[0].VolumeMounts)+len(c[0].Env)+len(c[0].EnvFrom) != 0 {
		t.Errorf("cached containers %+v, want names and images only", c)
	}
	if cached.UID != remote.UID || cached.Labels[offloadv1alpha1.LabelOriginPodUID] != string(local.UID) ||
		len(cached.Spec.Tolerations) != len(remote.Spec.Tolerations) || cached.Spec.NodeName != remote.Spec.NodeName {
		t.Errorf("cached metadata or spec differs from the remote pod's: %+v", cached)
	}

	// The consumer pod goes without the handler knowing: an orphan.
	if err := e.kube.CoreV1().Pods(e.consumer).Delete(ctx, local.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	framework.Eventually(t, waitTimeout, "the orphan and its token Secret are collected", func(ctx context.Context) bool {
		if err := e.h.CollectOrphans(ctx, nil); err != nil {
			t.Logf("CollectOrphans: %v", err)
			return false
		}
		_, err := e.kube.CoreV1().Secrets(e.twin).Get(ctx, reflection.TokenSecretName(local.Name), metav1.GetOptions{})
		return e.getRemote(ctx, t, local.Name) == nil && apierrors.IsNotFound(err)
	})
}

// A new version of a consumer pod shares the parts that did not change
// with the version the store holds, and nothing with another pod.
func TestPodVersionsShareWhatDidNotChange(t *testing.T) {
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	v := &PodVersions{Store: store}
	pod := func(uid, image string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "demo", UID: types.UID("uid-" + uid), Labels: map[string]string{"app": "web"},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
			Spec: corev1.PodSpec{NodeName: "offload-p", Containers: []corev1.Container{{Name: "app", Image: image,
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}}},
			Status: corev1.PodStatus{Phase: corev1.PodPending},
		}
	}
	transform := func(p *corev1.Pod) *corev1.Pod {
		t.Helper()
		out, err := v.Transform(p)
		if err != nil {
			t.Fatal(err)
		}
		return out.(*corev1.Pod)
	}
	first := transform(pod("a", "app:1"))
	if first.ManagedFields != nil {
		t.Errorf("managed fields kept: %v", first.ManagedFields)
	}
	// Printing a quantity caches its string: the next decoding of the
	// same spec differs in that, and is the same spec all the same.
	requests := first.Spec.Containers[0].Resources.Requests
	cpu := requests[corev1.ResourceCPU]
	_ = cpu.String()
	requests[corev1.ResourceCPU] = cpu
	if err := store.Add(first); err != nil {
		t.Fatal(err)
	}
	running := pod("a", "app:1")
	running.Status.Phase = corev1.PodRunning
	second := transform(running)
	if &second.Spec.Containers[0] != &first.Spec.Containers[0] || !same(second.Labels, first.Labels) {
		t.Error("an unchanged spec or labels are not shared with the stored version")
	}
	if second.Status.Phase != corev1.PodRunning {
		t.Errorf("status %q, want the new version's", second.Status.Phase)
	}
	if updated := transform(pod("a", "app:2")); &updated.Spec.Containers[0] == &first.Spec.Containers[0] || updated.Spec.Containers[0].Image != "app:2" {
		t.Errorf("a changed spec is shared: image %q", updated.Spec.Containers[0].Image)
	}
	if other := transform(pod("b", "app:1")); &other.Spec.Containers[0] == &first.Spec.Containers[0] {
		t.Error("a pod of another UID shares the stored pod's spec")
	}
}

// same reports whether a and b are the same map.
func same(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}
