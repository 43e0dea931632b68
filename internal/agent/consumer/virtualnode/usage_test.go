package virtualnode

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metricsv1beta1 "k8s.io/metrics/pkg/apis/metrics/v1beta1"
)

func TestPodUsageIsTheRemotePodsMeasureUnderTheConsumerPodsNames(t *testing.T) {
	started := metav1.NewTime(time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC))
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "work", Name: "web-1", UID: "consumer-uid"},
		Status: corev1.PodStatus{StartTime: &started, ContainerStatuses: []corev1.ContainerStatus{
			{Name: "app", State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: started}}},
			{Name: "waiting", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}}},
		}},
	}
	m := &metricsv1beta1.PodMetrics{
		ObjectMeta: metav1.ObjectMeta{Namespace: "work-consumer-abc123", Name: "web-1"},
		Containers: []metricsv1beta1.ContainerMetrics{
			{Name: "waiting", Usage: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("0"), corev1.ResourceMemory: resource.MustParse("0")}},
			{Name: "app", Usage: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("64Mi")}},
		},
	}
	u := podUsage(p, m)
	if u.Namespace != "work" || u.Name != "web-1" || u.UID != "consumer-uid" || !u.StartTime.Equal(started.Time) {
		t.Errorf("pod usage %+v; want the consumer pod's namespace, name, UID and start", u)
	}
	if len(u.Containers) != 2 || u.Containers[0].Name != "app" || u.Containers[1].Name != "waiting" {
		t.Fatalf("containers %+v; want app and waiting, by name", u.Containers)
	}
	app := u.Containers[0]
	if app.NanoCores != 250_000_000 || app.WorkingSetBytes != 64<<20 || !app.StartTime.Equal(started.Time) {
		t.Errorf("app %+v; want 250m, 64Mi, started with the consumer's container", app)
	}
	if w := u.Containers[1]; w.NanoCores != 0 || w.WorkingSetBytes != 0 || !w.StartTime.IsZero() {
		t.Errorf("a container that is not running: %+v", w)
	}
}
