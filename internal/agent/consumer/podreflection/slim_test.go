package podreflection

import (
	"context"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"
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

// The consumer's slim pod answers every reader of the consumer pod cache
// as the whole pod does, without what only creating a remote pod reads.
func TestTheSlimConsumerPodAnswersItsReadersAsTheWholePod(t *testing.T) {
	res := func(cpu, mem string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu),
			corev1.ResourceMemory: resource.MustParse(mem), corev1.ResourceEphemeralStorage: resource.MustParse("1Gi")}}
	}
	mounts := []corev1.VolumeMount{{Name: "kube-api-access-x1", MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}}
	whole := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "apps", UID: "u1", Generation: 2, Labels: map[string]string{"app": "web"},
			Annotations: map[string]string{"a": "b"}, OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "web-1", UID: "rs"}},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec: corev1.PodSpec{
			NodeName: "offload-p", ServiceAccountName: "runner", RestartPolicy: corev1.RestartPolicyAlways,
			ActiveDeadlineSeconds: ptr.To[int64](60), ReadinessGates: []corev1.PodReadinessGate{{ConditionType: "example.com/ready"}},
			Tolerations: []corev1.Toleration{{Key: "k", Operator: corev1.TolerationOpExists}},
			Overhead:    corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")},
			Volumes: []corev1.Volume{
				{Name: "kube-api-access-x1", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
					{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
					{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}}},
				}}}},
				{Name: "data", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}},
				{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			},
			InitContainers: []corev1.Container{{Name: "proxy", Image: "proxy:1", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
				Resources: res("100m", "64Mi"), VolumeMounts: mounts}},
			Containers: []corev1.Container{{Name: "app", Image: "app:1", Resources: res("250m", "128Mi"), VolumeMounts: mounts,
				Env:           []corev1.EnvVar{{Name: "GREETING", Value: "hello"}},
				ResizePolicy:  []corev1.ContainerResizePolicy{{ResourceName: corev1.ResourceCPU, RestartPolicy: corev1.NotRequired}},
				LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{Exec: &corev1.ExecAction{Command: []string{"true"}}}}}},
			EphemeralContainers: []corev1.EphemeralContainer{{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
				Name: "debug", Image: "busybox", Command: []string{"sh"}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, ObservedGeneration: 2,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	remote := whole.DeepCopy()
	remote.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.2.3",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Image: "app:1", Ready: true,
			AllocatedResources: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourcePods: resource.MustParse("1")}}}}
	got, err := SlimConsumerPod(whole.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	slim := got.(*corev1.Pod)

	if !reflection.NeedsToken(slim) {
		t.Error("the slim pod does not need a token; the whole pod mounts the service-account volume")
	}
	if w, s := resourcehelper.PodRequests(whole, resourcehelper.PodResourcesOptions{}), resourcehelper.PodRequests(slim, resourcehelper.PodResourcesOptions{}); !apiequality.Semantic.DeepEqual(w, s) {
		t.Errorf("the slim pod requests %v, the whole pod %v", s, w)
	}
	if w, s := reflection.ConsumerStatus(remote, whole, nodeIP, nil), reflection.ConsumerStatus(remote, slim, nodeIP, nil); !apiequality.Semantic.DeepEqual(w, s) {
		t.Errorf("the slim pod's status from its remote pod is\n%+v\nthe whole pod's\n%+v", s, w)
	}
	if slim.Spec.ServiceAccountName != "runner" || len(slim.Spec.EphemeralContainers) != 1 || slim.Spec.EphemeralContainers[0].Name != "debug" ||
		slim.Spec.Containers[0].Image != "app:1" || *slim.Spec.ActiveDeadlineSeconds != 60 || len(slim.Spec.Tolerations) != 1 {
		t.Errorf("the slim pod lost what a pod update changes or a token is renewed with: %+v", slim.Spec)
	}
	if !apiequality.Semantic.DeepEqual(slim.ObjectMeta, func() metav1.ObjectMeta { m := whole.ObjectMeta; m.ManagedFields = nil; return m }()) {
		t.Errorf("the slim pod's metadata is %+v, want the whole pod's less managedFields", slim.ObjectMeta)
	}
	// What only creating a remote pod reads is gone.
	if names := []string{}; len(slim.Spec.Volumes) != 2 || len(slim.Spec.Volumes[0].Projected.Sources) != 1 ||
		len(slim.Spec.Containers[0].Env)+len(slim.Spec.Containers[0].VolumeMounts) != 0 || slim.Spec.Containers[0].LivenessProbe != nil ||
		slim.Spec.EphemeralContainers[0].Command != nil {
		for _, v := range slim.Spec.Volumes {
			names = append(names, v.Name)
		}
		t.Errorf("the slim pod keeps volumes %v and containers %+v, want the token and claim volumes and no environment, mounts or probes", names, slim.Spec.Containers)
	}
	// Another pod of the ReplicaSet: one copy of their labels, owner,
	// tolerations and resources serves both.
	sibling := whole.DeepCopy()
	sibling.Name, sibling.UID = "web-2", "u2"
	got, err = SlimConsumerPod(sibling)
	if err != nil {
		t.Fatal(err)
	}
	other := got.(*corev1.Pod)
	if &other.Spec.Tolerations[0] != &slim.Spec.Tolerations[0] || &other.OwnerReferences[0] != &slim.OwnerReferences[0] ||
		reflect.ValueOf(other.Labels).UnsafePointer() != reflect.ValueOf(slim.Labels).UnsafePointer() ||
		reflect.ValueOf(other.Spec.Containers[0].Resources.Requests).UnsafePointer() != reflect.ValueOf(slim.Spec.Containers[0].Resources.Requests).UnsafePointer() {
		t.Error("two pods of one ReplicaSet keep two copies of their labels, owner, tolerations or resources")
	}
}
