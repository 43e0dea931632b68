package podreflection

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
