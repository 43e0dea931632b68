package podreflection

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/manager"
)

// runningPod is pod i of a Deployment as a kubelet reports it running, in
// the protobuf an informer decodes.
func runningPod(i int) []byte {
	now := metav1.NewTime(time.Unix(1700000000, 0))
	ip := fmt.Sprintf("10.244.%d.%d", i/250, i%250)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("web-7d9c8b6f5-%05d", i), GenerateName: "web-7d9c8b6f5-", Namespace: "shop",
			UID: types.UID(fmt.Sprintf("0b0f3c1e-1234-4a5b-9c8d-%012d", i)), ResourceVersion: fmt.Sprint(100000 + i), CreationTimestamp: now,
			Labels:          map[string]string{"app": "web", "pod-template-hash": "7d9c8b6f5"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d9c8b6f5", UID: "6c1a", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: "Update", APIVersion: "v1", Time: &now, FieldsType: "FieldsV1"}},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "app", Image: "registry.example/shop/web:1.2.3", ImagePullPolicy: corev1.PullIfNotPresent,
				Resources:              corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")}},
				TerminationMessagePath: "/dev/termination-log", TerminationMessagePolicy: corev1.TerminationMessageReadFile,
				VolumeMounts: []corev1.VolumeMount{{Name: "kube-api-access-x1y2z", ReadOnly: true, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}}}},
			Volumes: []corev1.Volume{{Name: "kube-api-access-x1y2z", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{Sources: []corev1.VolumeProjection{
				{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{Path: "token", ExpirationSeconds: ptr.To[int64](3607)}},
				{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"}, Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			}, DefaultMode: ptr.To[int32](420)}}}},
			RestartPolicy: corev1.RestartPolicyAlways, TerminationGracePeriodSeconds: ptr.To[int64](30), DNSPolicy: corev1.DNSClusterFirst,
			ServiceAccountName: "default", NodeName: "offload-provider", SecurityContext: &corev1.PodSecurityContext{},
			SchedulerName: corev1.DefaultSchedulerName, Priority: ptr.To[int32](0), EnableServiceLinks: ptr.To(true),
			Tolerations: []corev1.Toleration{{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)},
				{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To[int64](300)}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, HostIP: "10.0.0.5", HostIPs: []corev1.HostIP{{IP: "10.0.0.5"}}, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
			StartTime: &now, QOSClass: corev1.PodQOSBurstable,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReadyToStartContainers, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now}, {Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
				{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now}, {Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true, Started: ptr.To(true), Image: "registry.example/shop/web:1.2.3",
				ImageID:     "registry.example/shop/web@sha256:1f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c5b6a79881f2e3d4c5b6a7988",
				ContainerID: fmt.Sprintf("containerd://%064d", i), State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}}}},
		},
	}
	b, err := p.Marshal()
	if err != nil {
		panic(err)
	}
	return b
}

// BenchmarkSlimCopiesOfAnOffloadedPod reports what each cache that holds
// an offloaded pod keeps of it, in bytes of live heap per pod: the pod as
// decoded, the virtual node's informer's (SlimConsumerPod), the twin
// namespace's (slimRemotePod) and the manager's (manager.SlimPod). The
// consumer's agent holds the last three for each pod it offloads.
func BenchmarkSlimCopiesOfAnOffloadedPod(b *testing.B) {
	const n = 10000
	raw := make([][]byte, n)
	for i := range raw {
		raw[i] = runningPod(i)
	}
	for _, c := range []struct {
		name      string
		transform func(any) (any, error)
	}{
		{"decoded", func(o any) (any, error) { return o, nil }},
		{"consumer", SlimConsumerPod},
		{"remote", slimRemotePod},
		{"manager", manager.SlimPod},
	} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				kept := make([]any, n)
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				for i := range raw {
					p := &corev1.Pod{}
					if err := p.Unmarshal(raw[i]); err != nil {
						b.Fatal(err)
					}
					kept[i], _ = c.transform(p)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				runtime.KeepAlive(kept)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/pod")
			}
		})
	}
	runtime.KeepAlive(raw)
}
