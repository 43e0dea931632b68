package virtualnode

import (
	"context"
	"errors"
	"testing"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes/fake"
	corelisters "k8s.io/client-go/listers/core/v1"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/kubectl-offload/kubectl-offload/internal/agent/metrics"
)

func podRequesting(name, cpu, memory string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "work", UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(memory)}}}}},
		Status: corev1.PodStatus{Phase: phase}}
}

func TestRequestedCountsThePodsThatHaveNotEnded(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, p := range []*corev1.Pod{
		podRequesting("a", "250m", "64Mi", corev1.PodRunning),
		podRequesting("b", "500m", "128Mi", corev1.PodPending),
		podRequesting("done", "4", "8Gi", corev1.PodSucceeded),
		podRequesting("failed", "4", "8Gi", corev1.PodFailed),
	} {
		if err := idx.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	got := requested(corelisters.NewPodLister(idx))
	if got.Cpu().MilliValue() != 750 || got.Memory().Value() != 192<<20 || got.Pods().Value() != 2 {
		t.Errorf("requested %v, want 750m cpu, 192Mi and 2 pods: ended pods hold nothing", got)
	}
}

// TestThePodControllersWritesAreCountedWithTheirPropagationTime drives the
// wrappers as the PodController does: a status change notified, then its
// write; a pod bound, then its remote pod created.
func TestThePodControllersWritesAreCountedWithTheirPropagationTime(t *testing.T) {
	peer := "peer-" + rand.String(6)
	pod := podRequesting("web", "100m", "16Mi", corev1.PodRunning)
	kube := fake.NewClientset(pod)
	kube.PrependReactor("update", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if u, ok := a.(k8stesting.UpdateAction); ok && a.GetSubresource() == "status" && u.GetObject().(*corev1.Pod).Name == "refused" {
			return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "refused", errors.New("no"))
		}
		return false, nil, nil
	})
	o := newObserver(peer)
	c := podsClient{PodsGetter: kube.CoreV1(), o: o}
	t.Cleanup(o.Forget)

	var notified []*corev1.Pod
	o.notifying(func(p *corev1.Pod) { notified = append(notified, p) })(pod)
	if len(notified) != 1 {
		t.Fatalf("the PodController was notified of %d pods, want 1", len(notified))
	}
	if _, err := c.Pods("work").UpdateStatus(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	refused := podRequesting("refused", "1", "1Mi", corev1.PodRunning)
	if _, err := c.Pods("work").UpdateStatus(context.Background(), refused, metav1.UpdateOptions{}); err == nil {
		t.Fatal("the refused status write succeeded")
	}
	if _, err := c.Pods("work").UpdateStatus(context.Background(), podRequesting("gone", "1", "1Mi", corev1.PodRunning), metav1.UpdateOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("writing the status of a pod that does not exist: %v", err)
	}
	if err := c.Pods("work").Delete(context.Background(), "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	if got := counterValue(t, "offload_pod_reflections_total", peer, metrics.ToConsumer, metrics.OperationStatus); got != 1 {
		t.Errorf("statuses written %v, want 1", got)
	}
	if got := counterValue(t, "offload_pod_reflection_errors_total", peer, metrics.ToConsumer, "Forbidden"); got != 1 {
		t.Errorf("Forbidden status writes %v, want 1 (a pod gone is no error)", got)
	}
	if got := counterValue(t, "offload_pod_reflections_total", peer, metrics.ToConsumer, metrics.OperationDelete); got != 1 {
		t.Errorf("consumer pods deleted %v, want 1", got)
	}
	if n := histogramCount(t, "offload_pod_status_propagation_seconds", peer); n != 1 {
		t.Errorf("status propagations observed %d, want 1: the one notified", n)
	}
	if _, ok := o.since(o.notified, pod.UID); ok {
		t.Error("the written status's start is still held")
	}

	// A pod bound after the first list starts its create propagation; one
	// of the first list does not; a deleted pod's starts go.
	handler := o.handler().(cache.ResourceEventHandlerDetailedFuncs)
	handler.AddFunc(podRequesting("old", "1", "1Mi", corev1.PodRunning), true)
	handler.AddFunc(podRequesting("new", "1", "1Mi", corev1.PodPending), false)
	handler.AddFunc(podRequesting("short-lived", "1", "1Mi", corev1.PodPending), false)
	handler.DeleteFunc(cache.DeletedFinalStateUnknown{Obj: podRequesting("short-lived", "1", "1Mi", corev1.PodPending)})
	o.mu.Lock()
	_, old := o.bound["uid-old"]
	_, bound := o.bound["uid-new"]
	_, deleted := o.bound["uid-short-lived"]
	o.mu.Unlock()
	if old || !bound || deleted {
		t.Errorf("create propagations under way: first list %v, new %v, deleted %v; want only the new pod's", old, bound, deleted)
	}
}

func counterValue(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	for _, m := range gather(t, name) {
		if hasLabels(m, labels) {
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

func histogramCount(t *testing.T, name, peer string) uint64 {
	t.Helper()
	for _, m := range gather(t, name) {
		if hasLabels(m, []string{peer}) {
			return m.GetHistogram().GetSampleCount()
		}
	}
	return 0
}

func gather(t *testing.T, name string) []*dto.Metric {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name {
			return f.GetMetric()
		}
	}
	return nil
}

func hasLabels(m *dto.Metric, values []string) bool {
	have := map[string]bool{}
	for _, l := range m.GetLabel() {
		have[l.GetValue()] = true
	}
	for _, v := range values {
		if !have[v] {
			return false
		}
	}
	return true
}
