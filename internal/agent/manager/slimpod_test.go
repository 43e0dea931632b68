package manager

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kubectl-offload/kubectl-offload/test/framework"
	"github.com/kubectl-offload/kubectl-offload/test/framework/envtest"
)

func TestASlimPodKeepsWhatTheControllersRead(t *testing.T) {
	req := func(cpu, mem string) corev1.ResourceRequirements {
		return corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}}
	}
	now := metav1.Now()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: "web", Namespace: "work", UID: "u1", ResourceVersion: "7", DeletionTimestamp: &now,
			Labels:        map[string]string{"app": "web"},
			Annotations:   map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{...}"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
		},
		Spec: corev1.PodSpec{
			NodeName: "node-1", HostNetwork: true,
			InitContainers: []corev1.Container{
				{Name: "setup", Image: "busybox", Resources: req("2", "1Gi")},
				{Name: "proxy", Image: "envoy", Resources: req("100m", "64Mi"), RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways)},
			},
			Containers: []corev1.Container{{Name: "app", Image: "app:1", Resources: req("500m", "256Mi"),
				Env: []corev1.EnvVar{{Name: "BIG", Value: "x"}}, Args: []string{"--serve"}}},
			Overhead: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("10m")},
			Volumes:  []corev1.Volume{{Name: "data"}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "10.0.0.5", PodIPs: []corev1.PodIP{{IP: "10.0.0.5"}}, HostIP: "192.0.2.1",
			ContainerStatuses: []corev1.ContainerStatus{{Name: "app", Ready: true}},
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
	got, err := SlimPod(pod.DeepCopy())
	if err != nil {
		t.Fatal(err)
	}
	slim := got.(*corev1.Pod)
	if a, b := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}), resourcehelper.PodRequests(slim, resourcehelper.PodResourcesOptions{}); !apiequality.Semantic.DeepEqual(a, b) {
		t.Errorf("the slim pod requests %v, the pod %v", b, a)
	}
	if slim.Name != "web" || slim.Namespace != "work" || slim.UID != "u1" || slim.ResourceVersion != "7" || slim.DeletionTimestamp == nil ||
		slim.Labels["app"] != "web" || slim.Spec.NodeName != "node-1" || !slim.Spec.HostNetwork ||
		slim.Status.Phase != corev1.PodRunning || slim.Status.PodIPs[0].IP != "10.0.0.5" {
		t.Errorf("the slim pod lost a field the controllers read: %+v", slim)
	}
	if slim.Annotations != nil || slim.ManagedFields != nil || slim.Spec.Volumes != nil || slim.Spec.Containers[0].Env != nil ||
		slim.Spec.Containers[0].Image != "" || slim.Status.ContainerStatuses != nil || slim.Status.Conditions != nil {
		t.Errorf("the slim pod kept fields no controller reads: %+v", slim)
	}
	if other, _ := SlimPod(&corev1.Node{}); other == nil {
		t.Error("SlimPod dropped an object that is not a pod")
	}
}

func TestTheCacheHoldsBoundPodsOnly(t *testing.T) {
	cfg := envtest.APIServer(t)
	c := envtest.NewClient(t, cfg)
	ns := envtest.NewNamespace(t, c, "cache")
	mgr, err := New(cfg, testOptions(t, ns))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { _ = mgr.GetCache().Start(ctx) }()
	pod := func(name, node string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "app", Image: "app:1"}}}}
	}
	for _, p := range []*corev1.Pod{pod("pending", ""), pod("bound", "node-1")} {
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	var pods corev1.PodList
	framework.Eventually(t, time.Minute, "the bound pod in the cache", func(ctx context.Context) bool {
		return mgr.GetCache().List(ctx, &pods, client.InNamespace(ns)) == nil && len(pods.Items) > 0
	})
	if len(pods.Items) != 1 || pods.Items[0].Name != "bound" || pods.Items[0].Spec.Containers[0].Image != "" {
		t.Errorf("the cache holds %+v; want only the bound pod, slimmed", pods.Items)
	}
}
